import { generate } from 'otplib';
import { hashSecret } from '../../src/lib/crypto';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';

/**
 * TOTP and recovery codes as a person uses them: enrolling an authenticator app, showing a
 * code to a session an organization holds back, stepping up before changing factors.
 * Codes are computed from the secret the API hands out, at the times the test chooses.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const STEP_S = 30;
/** The code an app shows `offset` steps from now. */
const codeAt = (secret: string, offset = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + offset * STEP_S });
const sessionIn = (res: { headers: Headers }) => /^__Host-cp_session=([^;]+);/.exec(res.headers.get('set-cookie') ?? '')?.[1];

async function person(options: { requireMfa?: boolean } = {}) {
  const email = `p.${Date.now()}.${Math.random().toString(36).slice(2)}@example.com`;
  const userId = await t.factories.user({ email });
  const { orgId } = await t.factories.org({ requireMfa: options.requireMfa });
  await t.factories.member(orgId, { userId });
  return { userId, orgId, email, session: await t.factories.session(userId) };
}

/** Enrolls TOTP for the person's session; answers the secret, the codes and the session's new cookie. */
async function enroll(session: string) {
  const begun = await t.call('POST', '/user/me/mfa/totp', undefined, { session });
  expect(begun.status).toBe(200);
  const secret: string = begun.body.secret;
  const verified = await t.call('POST', '/user/me/mfa/totp/verify', { code: await codeAt(secret) }, { session });
  expect(verified.status).toBe(200);
  return { secret, codes: verified.body.recovery_codes as string[], session: sessionIn(verified)! };
}

describe('TOTP enrollment', () => {
  it('shows the secret once, turns TOTP on with a code from the app, and hands out ten recovery codes', async () => {
    const { session, email, userId } = await person();
    const begun = await t.call('POST', '/user/me/mfa/totp', undefined, { session });
    expect(begun.status).toBe(200);
    expect(begun.headers.get('cache-control')).toBe('no-store');
    expect(begun.body).toMatchObject({ issuer: 'MCP control plane', account_name: email, algorithm: 'SHA1', digits: 6, period: 30 });
    expect(begun.body.otpauth_uri).toContain(`secret=${begun.body.secret}`);
    // Still off, and the secret is sealed at rest.
    expect((await t.call('GET', '/user/me', undefined, { session })).body.mfa_enabled).toBe(false);
    const row = await t.db.selectFrom('users').select(['totp_pending_secret_enc', 'totp_secret_enc']).where('id', '=', userId).executeTakeFirstOrThrow();
    expect(row.totp_pending_secret_enc).not.toContain(begun.body.secret);

    expectError(await t.call('POST', '/user/me/mfa/totp/verify', { code: '000000' }, { session }), 400, 'verification_failed');
    const verified = await t.call('POST', '/user/me/mfa/totp/verify', { code: await codeAt(begun.body.secret) }, { session });
    expect(verified.status).toBe(200);
    expect(verified.headers.get('cache-control')).toBe('no-store');
    expect(verified.body.recovery_codes).toHaveLength(10);
    for (const code of verified.body.recovery_codes) expect(code).toMatch(/^[a-z0-9]{5}-[a-z0-9]{5}$/);

    // The session's secret was replaced: the old cookie is worth nothing, the new one has shown a factor.
    const renewed = sessionIn(verified)!;
    expectError(await t.call('GET', '/user/me', undefined, { session }), 401, 'invalid_token');
    expect((await t.call('GET', '/user/me', undefined, { session: renewed })).body.mfa_enabled).toBe(true);
    const codes = await t.db.selectFrom('recovery_codes').select('code_hash').where('user_id', '=', userId).execute();
    expect(codes.map((c) => c.code_hash).sort()).toEqual(verified.body.recovery_codes.map((c: string) => hashSecret(c.replace('-', ''))).sort());
  });

  it('409 conflict: no pending enrollment, or TOTP already on', async () => {
    const { session } = await person();
    expectError(await t.call('POST', '/user/me/mfa/totp/verify', { code: '123456' }, { session }), 409, 'conflict');
    const { session: renewed } = await enroll(session);
    expectError(await t.call('POST', '/user/me/mfa/totp', undefined, { session: renewed }), 409, 'conflict');
  });

  it('403 step_up_required to add an authenticator app once a passkey is held', async () => {
    const { session, userId } = await person();
    await t.factories.passkey(userId);
    expectError(await t.call('POST', '/user/me/mfa/totp', undefined, { session }), 403, 'step_up_required');
  });

  it('403 requires_person for an API token', async () => {
    const { token } = await t.factories.org();
    expectError(await t.call('POST', '/user/me/mfa/totp', undefined, { token }), 403, 'requires_person');
  });
});

describe('verifyMfaChallenge', () => {
  it('lets a session into an organization that requires a second factor once it shows a code, each code once', async () => {
    const { session, orgId, userId } = await person();
    const { secret, session: enrolled } = await enroll(session);
    await t.db.updateTable('organizations').set({ require_mfa: true }).where('id', '=', orgId).execute();
    // A new sign-in: this session has shown nothing.
    const fresh = await t.factories.session(userId);
    expectError(await t.call('GET', `/organization/${orgId}`, undefined, { session: fresh, org: orgId }), 403, 'mfa_setup_required');

    const code = await codeAt(secret, 1);
    const shown = await t.call('POST', '/auth/mfa/verify', { method: 'totp', code }, { session: fresh });
    expect(shown.status).toBe(200);
    expect(shown.body.session).toMatchObject({ state: 'active', second_factor_method: 'totp', user_id: userId });
    expect(shown.body.recovery_codes_remaining).toBe(10);
    const renewed = sessionIn(shown)!;
    expect((await t.call('GET', `/organization/${orgId}`, undefined, { session: renewed, org: orgId })).status).toBe(200);

    // The same code again (RFC 6238 §5.2), and an earlier one after a later was used, are refused.
    expectError(await t.call('POST', '/auth/mfa/verify', { method: 'totp', code }, { session: renewed }), 400, 'verification_failed');
    expectError(await t.call('POST', '/auth/mfa/verify', { method: 'totp', code: await codeAt(secret, 0) }, { session: renewed }), 400, 'verification_failed');
    expect(enrolled).toBeDefined();
  });

  it('uses a recovery code up, in any case and with or without its dash', async () => {
    const { session, userId } = await person();
    const { codes } = await enroll(session);
    const fresh = await t.factories.session(userId);
    const typed = codes[0]!.replace('-', '').toUpperCase();
    const shown = await t.call('POST', '/auth/mfa/verify', { method: 'recovery_code', code: typed }, { session: fresh });
    expect(shown.status).toBe(200);
    expect(shown.body.session.second_factor_method).toBe('recovery_code');
    expect(shown.body.recovery_codes_remaining).toBe(9);
    const again = await t.factories.session(userId);
    expectError(await t.call('POST', '/auth/mfa/verify', { method: 'recovery_code', code: codes[0] }, { session: again }), 400, 'verification_failed');
  });

  it('429 rate_limited after five wrong codes in 15 minutes, even with the right one', async () => {
    const { session, userId } = await person();
    const { secret } = await enroll(session);
    const fresh = await t.factories.session(userId);
    for (let i = 0; i < 5; i += 1)
      expectError(await t.call('POST', '/auth/mfa/verify', { method: 'totp', code: '000000' }, { session: fresh }), 400, 'verification_failed');
    const held = await t.call('POST', '/auth/mfa/verify', { method: 'totp', code: await codeAt(secret, 1) }, { session: fresh });
    expectError(held, 429, 'rate_limited');
    expect(Number(held.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('409 conflict for a code of a kind the person does not hold', async () => {
    const { session } = await person();
    expectError(await t.call('POST', '/auth/mfa/verify', { method: 'totp', code: '123456' }, { session }), 409, 'conflict');
  });
});

describe('step-up before changing factors', () => {
  it('refuses turning TOTP off and new recovery codes without a step-up, allows them for 5 minutes after one', async () => {
    const { session } = await person();
    const { secret, session: enrolled } = await enroll(session);
    expectError(await t.call('DELETE', '/user/me/mfa/totp', undefined, { session: enrolled }), 403, 'step_up_required');
    expectError(await t.call('POST', '/user/me/mfa/recovery-codes/regenerate', undefined, { session: enrolled }), 403, 'step_up_required');

    const options = await t.call('POST', '/auth/step-up/options', undefined, { session: enrolled });
    expect(options.body).toEqual({ methods: ['totp', 'recovery_code'], passkey_options: null, valid_for_seconds: 300 });
    const stepped = await t.call('POST', '/auth/step-up/verify', { method: 'totp', code: await codeAt(secret, 1) }, { session: enrolled });
    expect(stepped.status).toBe(200);
    expect(stepped.body.session.step_up_at).not.toBeNull();
    expect(Date.parse(stepped.body.session.step_up_expires_at) - Date.parse(stepped.body.session.step_up_at)).toBe(300_000);
    const now = sessionIn(stepped)!;

    const regenerated = await t.call('POST', '/user/me/mfa/recovery-codes/regenerate', undefined, { session: now });
    expect(regenerated.status).toBe(200);
    expect(regenerated.body.recovery_codes).toHaveLength(10);
    expect((await t.call('DELETE', '/user/me/mfa/totp', undefined, { session: now })).status).toBe(204);
    expect((await t.call('GET', '/user/me', undefined, { session: now })).body.mfa_enabled).toBe(false);
  });

  it('409 mfa_required_by_organization: TOTP stays while an organization requires a factor and no passkey is held', async () => {
    const { session, orgId } = await person();
    const { secret, session: enrolled } = await enroll(session);
    await t.db.updateTable('organizations').set({ require_mfa: true }).where('id', '=', orgId).execute();
    const now = sessionIn(await t.call('POST', '/auth/step-up/verify', { method: 'totp', code: await codeAt(secret, 1) }, { session: enrolled }))!;
    expectError(await t.call('DELETE', '/user/me/mfa/totp', undefined, { session: now }), 409, 'mfa_required_by_organization');
  });

  it('409 conflict: nothing to step up with', async () => {
    const { session } = await person();
    expectError(await t.call('POST', '/auth/step-up/options', undefined, { session }), 409, 'conflict');
  });
});
