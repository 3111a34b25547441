import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { usePeers } from '../support/peers';
import { SoftAuthenticator } from '../support/webauthn';

/**
 * Passkeys over HTTP, with a software authenticator (test/support/webauthn.ts) whose
 * responses the server verifies as it verifies a browser's: registration, the person's list,
 * signing in, the second factor and step-up, and each rule WebAuthn's clauses set (origin,
 * single-use challenges bound to a session, counter, user handle, ownership).
 */
const peers = usePeers();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
});
afterAll(() => t.close());

const sessionIn = (res: { headers: Headers }) => /^__Host-cp_session=([^;]+);/.exec(res.headers.get('set-cookie') ?? '')?.[1];

async function person(options: { requireMfa?: boolean } = {}) {
  const email = `p.${Date.now()}.${Math.random().toString(36).slice(2)}@example.com`;
  const userId = await t.factories.user({ email });
  const { orgId } = await t.factories.org({ requireMfa: options.requireMfa });
  await t.factories.member(orgId, { userId });
  return { userId, orgId, email, session: await t.factories.session(userId) };
}

/** Registers a passkey on `authenticator` for the session; answers the passkey and the session's new cookie. */
async function register(session: string, authenticator = new SoftAuthenticator(), name?: string) {
  const options = await t.call('POST', '/auth/passkey/registration/options', undefined, { session });
  expect(options.status).toBe(200);
  const res = await t.call(
    'POST',
    '/auth/passkey/registration/verify',
    { credential: authenticator.create(options.body, t.url), ...(name ? { name } : {}) },
    { session },
  );
  expect(res.status).toBe(201);
  return { passkey: res.body, session: sessionIn(res)!, authenticator };
}

/** Steps the session up with its passkey; answers the new cookie. */
async function stepUp(session: string, authenticator: SoftAuthenticator) {
  const begun = await t.call('POST', '/auth/step-up/options', undefined, { session });
  expect(begun.status).toBe(200);
  const res = await t.call(
    'POST',
    '/auth/step-up/verify',
    { method: 'passkey', credential: authenticator.get(begun.body.passkey_options, t.url) },
    { session },
  );
  expect(res.status).toBe(200);
  return sessionIn(res)!;
}

async function signInOptions(session?: string) {
  const res = await t.call('POST', '/auth/passkey/authentication/options', undefined, session ? { session } : {});
  expect(res.status).toBe(200);
  return res.body;
}

describe('registration', () => {
  it('registers a discoverable passkey with user verification, renews the session, and lists it', async () => {
    const { session, userId } = await person();
    const options = await t.call('POST', '/auth/passkey/registration/options', undefined, { session });
    expect(options.body).toMatchObject({
      rp: { id: 'localhost', name: 'MCP control plane' },
      authenticatorSelection: { residentKey: 'required', requireResidentKey: true, userVerification: 'required' },
      attestation: 'none',
      excludeCredentials: [],
      timeout: 300000,
    });
    // The user handle is random bytes, never the email or the user id.
    expect(Buffer.from(options.body.user.id, 'base64url')).toHaveLength(32);
    const authenticator = new SoftAuthenticator();
    const res = await t.call('POST', '/auth/passkey/registration/verify', { credential: authenticator.create(options.body, t.url) }, { session });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/auth/passkey/${res.body.id}`);
    expect(res.body).toMatchObject({ name: 'Passkey', authenticator_name: null, backed_up: false, transports: ['internal'], last_used_at: null });
    const renewed = sessionIn(res)!;
    expectError(await t.call('GET', '/user/me', undefined, { session }), 401, 'invalid_token');
    const list = await t.call('GET', '/auth/passkey', undefined, { session: renewed });
    expect(list.body).toEqual({ data: [res.body], next_cursor: null });
    const row = await t.db
      .selectFrom('sessions')
      .select('second_factor_method')
      .where('user_id', '=', userId)
      .where('revoked_at', 'is', null)
      .executeTakeFirstOrThrow();
    expect(row.second_factor_method).toBe('passkey');
  });

  it('names a passkey from its AAGUID when the authenticator is a known one, and keeps its backup state', async () => {
    const { session } = await person();
    const icloud = new SoftAuthenticator(true, Buffer.from('fbfc3007154e4ecc8c0b6e020557d7bd', 'hex'));
    const { passkey } = await register(session, icloud);
    expect(passkey).toMatchObject({ name: 'iCloud Keychain', authenticator_name: 'iCloud Keychain', backed_up: true });
  });

  it('400 verification_failed: a response made on another origin', async () => {
    const { session } = await person();
    const options = await t.call('POST', '/auth/passkey/registration/options', undefined, { session });
    const credential = new SoftAuthenticator().create(options.body, 'https://evil.example');
    expectError(await t.call('POST', '/auth/passkey/registration/verify', { credential }, { session }), 400, 'verification_failed');
  });

  it('400 challenge_expired: a challenge used twice, one past its time, or one given to another session', async () => {
    const { session, userId } = await person();
    const authenticator = new SoftAuthenticator();
    const options = await t.call('POST', '/auth/passkey/registration/options', undefined, { session });
    const credential = authenticator.create(options.body, t.url);
    const first = await t.call('POST', '/auth/passkey/registration/verify', { credential }, { session });
    expect(first.status).toBe(201);
    const renewed = sessionIn(first)!;
    // Replayed: the challenge was used up.
    const again = await stepUp(renewed, authenticator);
    expectError(await t.call('POST', '/auth/passkey/registration/verify', { credential }, { session: again }), 400, 'challenge_expired');

    const expiring = await t.call('POST', '/auth/passkey/registration/options', undefined, { session: again });
    await t.db
      .updateTable('webauthn_challenges')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('challenge', '=', expiring.body.challenge)
      .execute();
    const late = new SoftAuthenticator().create(expiring.body, t.url);
    expectError(await t.call('POST', '/auth/passkey/registration/verify', { credential: late }, { session: again }), 400, 'challenge_expired');

    const mine = await t.call('POST', '/auth/passkey/registration/options', undefined, { session: again });
    const other = await t.factories.session(userId);
    const elsewhere = new SoftAuthenticator().create(mine.body, t.url);
    expectError(await t.call('POST', '/auth/passkey/registration/verify', { credential: elsewhere }, { session: other }), 400, 'challenge_expired');
  });

  it('403 step_up_required to add a passkey once the person holds a factor; a step-up with the passkey lets them', async () => {
    const { session } = await person();
    const { session: renewed, authenticator } = await register(session);
    expectError(await t.call('POST', '/auth/passkey/registration/options', undefined, { session: renewed }), 403, 'step_up_required');
    const stepped = await stepUp(renewed, authenticator);
    const { passkey } = await register(stepped, new SoftAuthenticator(), 'YubiKey');
    expect(passkey.name).toBe('YubiKey');
  });

  it('403 step_up_required to add a passkey when TOTP is on', async () => {
    const { session, userId } = await person();
    await t.factories.enableTotp(userId);
    expectError(await t.call('POST', '/auth/passkey/registration/options', undefined, { session }), 403, 'step_up_required');
  });
});

describe('the person’s passkeys', () => {
  it('renames one; another person’s passkey is 404 to rename and to delete', async () => {
    const { session } = await person();
    const { passkey, session: mine } = await register(session);
    const renamed = await t.call('PATCH', `/auth/passkey/${passkey.id}`, { name: 'Laptop' }, { session: mine });
    expect(renamed.status).toBe(200);
    expect(renamed.body.name).toBe('Laptop');

    const stranger = await person();
    expectError(await t.call('PATCH', `/auth/passkey/${passkey.id}`, { name: 'Mine now' }, { session: stranger.session }), 404, 'not_found');
    expectError(await t.call('DELETE', `/auth/passkey/${passkey.id}`, undefined, { session: stranger.session }), 404, 'not_found');
    const list = await t.call('GET', '/auth/passkey', undefined, { session: stranger.session });
    expect(list.body.data).toEqual([]);
  });

  it('403 step_up_required to delete a passkey; deleted after a step-up', async () => {
    const { session } = await person();
    const { passkey, session: mine, authenticator } = await register(session);
    expectError(await t.call('DELETE', `/auth/passkey/${passkey.id}`, undefined, { session: mine }), 403, 'step_up_required');
    const stepped = await stepUp(mine, authenticator);
    expect((await t.call('DELETE', `/auth/passkey/${passkey.id}`, undefined, { session: stepped })).status).toBe(204);
    expectError(await t.call('DELETE', `/auth/passkey/${passkey.id}`, undefined, { session: stepped }), 404, 'not_found');
  });

  it('emails the person when a passkey is added and when one is deleted', async () => {
    const { session, email } = await person();
    const { passkey, session: mine, authenticator } = await register(session, new SoftAuthenticator(), 'Work laptop');
    const stepped = await stepUp(mine, authenticator);
    expect((await t.call('DELETE', `/auth/passkey/${passkey.id}`, undefined, { session: stepped })).status).toBe(204);
    const subjects = async () => peers.smtp.messages.filter((m) => m.to.includes(email)).map((m) => /^Subject: (.*)$/m.exec(m.raw)?.[1]);
    for (let waited = 0; (await subjects()).length < 2 && waited < 5000; waited += 50) await new Promise((r) => setTimeout(r, 50));
    expect(await subjects()).toEqual(['A passkey was added to your account', 'A passkey was removed from your account']);
    expect(peers.smtp.messages.filter((m) => m.to.includes(email)).at(-1)!.raw).toContain('Work laptop');
  });

  it('409 mfa_required_by_organization: the last factor of a person whose organization requires one', async () => {
    const { session } = await person({ requireMfa: true });
    const { passkey, session: mine, authenticator } = await register(session);
    const stepped = await stepUp(mine, authenticator);
    expectError(await t.call('DELETE', `/auth/passkey/${passkey.id}`, undefined, { session: stepped }), 409, 'mfa_required_by_organization');
  });
});

describe('signing in with a passkey', () => {
  it('signs in with an active session that has shown its second factor, and records the use', async () => {
    const { session, userId } = await person({ requireMfa: true });
    const { passkey, authenticator } = await register(session);
    const options = await signInOptions();
    expect(options).toMatchObject({ rpId: 'localhost', allowCredentials: [], userVerification: 'required' });
    const res = await t.call('POST', '/auth/passkey/authentication/verify', { credential: authenticator.get(options, t.url), return_to: '/org/x?y=1' });
    expect(res.status).toBe(200);
    expect(res.body.redirect_to).toBe('/org/x?y=1');
    expect(res.body.session).toMatchObject({ user_id: userId, state: 'active', second_factor_method: 'passkey' });
    const cookie = sessionIn(res)!;
    expect((await t.call('GET', '/user/me', undefined, { session: cookie })).body.id).toBe(userId);
    const row = await t.db.selectFrom('passkeys').select(['counter', 'last_used_at']).where('id', '=', passkey.id).executeTakeFirstOrThrow();
    expect(Number(row.counter)).toBe(1);
    expect(row.last_used_at).not.toBeNull();
  });

  it('400 challenge_expired: the same assertion sent twice', async () => {
    const { session } = await person();
    const { authenticator } = await register(session);
    const credential = authenticator.get(await signInOptions(), t.url);
    expect((await t.call('POST', '/auth/passkey/authentication/verify', { credential })).status).toBe(200);
    expectError(await t.call('POST', '/auth/passkey/authentication/verify', { credential }), 400, 'challenge_expired');
  });

  it('400 verification_failed: an assertion made on another origin', async () => {
    const { session } = await person();
    const { authenticator } = await register(session);
    const credential = authenticator.get(await signInOptions(), 'http://127.0.0.1:1');
    expectError(await t.call('POST', '/auth/passkey/authentication/verify', { credential }), 400, 'verification_failed');
  });

  it('400 verification_failed: a signature counter that goes backwards (a cloned authenticator)', async () => {
    const { session, userId } = await person();
    const { authenticator } = await register(session);
    expect(
      (await t.call('POST', '/auth/passkey/authentication/verify', { credential: authenticator.get(await signInOptions(), t.url, { counter: 7 }) })).status,
    ).toBe(200);
    const backwards = authenticator.get(await signInOptions(), t.url, { counter: 3 });
    expectError(await t.call('POST', '/auth/passkey/authentication/verify', { credential: backwards }), 400, 'verification_failed');
    const row = await t.db.selectFrom('passkeys').select('counter').where('user_id', '=', userId).executeTakeFirstOrThrow();
    expect(Number(row.counter)).toBe(7);
  });

  it('accepts a counter that stays 0 (a synced passkey keeps none) and keeps backed_up current', async () => {
    const { session, userId } = await person();
    const { authenticator } = await register(session, new SoftAuthenticator(true));
    await t.db.updateTable('passkeys').set({ backed_up: false }).where('user_id', '=', userId).execute();
    for (let i = 0; i < 2; i++) {
      const credential = authenticator.get(await signInOptions(), t.url, { counter: 0 });
      expect((await t.call('POST', '/auth/passkey/authentication/verify', { credential })).status).toBe(200);
    }
    const row = await t.db.selectFrom('passkeys').select(['counter', 'backed_up']).where('user_id', '=', userId).executeTakeFirstOrThrow();
    expect(Number(row.counter)).toBe(0);
    expect(row.backed_up).toBe(true);
  });

  it('400 verification_failed: a user handle that is not the passkey owner’s, or none', async () => {
    const { session } = await person();
    const { authenticator } = await register(session);
    const other = await person();
    const { authenticator: theirs } = await register(other.session);
    const forged = authenticator.get(await signInOptions(), t.url, { userHandle: theirs.passkeys[0]!.userHandle });
    expectError(await t.call('POST', '/auth/passkey/authentication/verify', { credential: forged }), 400, 'verification_failed');
    const anonymous = authenticator.get(await signInOptions(), t.url, { userHandle: null });
    expectError(await t.call('POST', '/auth/passkey/authentication/verify', { credential: anonymous }), 400, 'verification_failed');
  });

  it('400 verification_failed: a passkey nobody registered (nothing says which exist)', async () => {
    const stranger = new SoftAuthenticator();
    stranger.create({ rp: { id: 'localhost' }, user: { id: 'AAAA' }, challenge: 'x' }, t.url);
    const credential = stranger.get(await signInOptions(), t.url);
    expectError(await t.call('POST', '/auth/passkey/authentication/verify', { credential }), 400, 'verification_failed');
  });

  it('403 insufficient_access: a sign-in posted from another site’s page', async () => {
    const { session } = await person();
    const { authenticator } = await register(session);
    const credential = authenticator.get(await signInOptions(), t.url);
    const res = await t.call(
      'POST',
      '/auth/passkey/authentication/verify',
      { credential },
      { headers: { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' } },
    );
    expectError(res, 403, 'insufficient_access');
  });

  it('403 insufficient_access: a sign-in posted from another site’s page by a browser that holds a session', async () => {
    const { session } = await person();
    const { session: mine, authenticator } = await register(session);
    const credential = authenticator.get(await signInOptions(mine), t.url);
    const res = await t.call(
      'POST',
      '/auth/passkey/authentication/verify',
      { credential },
      { session: mine, headers: { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' } },
    );
    expectError(res, 403, 'insufficient_access');
  });
});

describe('a passkey as the second factor and for step-up', () => {
  it('completes an mfa_pending session with options asked for by that session', async () => {
    const { userId, orgId, session } = await person({ requireMfa: true });
    const { authenticator } = await register(session);
    const pending = await t.factories.session(userId);
    expectError(await t.call('GET', `/organization/${orgId}`, undefined, { session: pending, org: orgId }), 403, 'mfa_setup_required');
    const options = await signInOptions(pending);
    const res = await t.call('POST', '/auth/mfa/verify', { method: 'passkey', credential: authenticator.get(options, t.url) }, { session: pending });
    expect(res.status).toBe(200);
    expect(res.body.session).toMatchObject({ state: 'active', second_factor_method: 'passkey' });
    expect((await t.call('GET', `/organization/${orgId}`, undefined, { session: sessionIn(res)!, org: orgId })).status).toBe(200);
  });

  it('400 challenge_expired: a second factor answering options no session asked for', async () => {
    const { userId, session } = await person({ requireMfa: true });
    const { authenticator } = await register(session);
    const pending = await t.factories.session(userId);
    const unbound = await signInOptions();
    const res = await t.call('POST', '/auth/mfa/verify', { method: 'passkey', credential: authenticator.get(unbound, t.url) }, { session: pending });
    expectError(res, 400, 'challenge_expired');
  });

  it('step-up options list the person’s passkeys; the step-up opens the five-minute window', async () => {
    const { session } = await person();
    const { passkey, session: mine, authenticator } = await register(session);
    const begun = await t.call('POST', '/auth/step-up/options', undefined, { session: mine });
    expect(begun.body.methods).toEqual(['passkey']);
    expect(begun.body.passkey_options.allowCredentials).toEqual([{ id: passkey.credential_id, type: 'public-key', transports: ['internal'] }]);
    const res = await t.call(
      'POST',
      '/auth/step-up/verify',
      { method: 'passkey', credential: authenticator.get(begun.body.passkey_options, t.url) },
      { session: mine },
    );
    expect(res.status).toBe(200);
    expect(res.body.session.step_up_expires_at).not.toBeNull();
  });

  it('400 verification_failed: a step-up with another person’s passkey', async () => {
    const { session } = await person();
    const { session: mine } = await register(session);
    const other = await person();
    const { authenticator: theirs } = await register(other.session);
    const begun = await t.call('POST', '/auth/step-up/options', undefined, { session: mine });
    const res = await t.call(
      'POST',
      '/auth/step-up/verify',
      { method: 'passkey', credential: theirs.get(begun.body.passkey_options, t.url) },
      { session: mine },
    );
    expectError(res, 400, 'verification_failed');
  });

  it('400 challenge_expired: a step-up answering sign-in options', async () => {
    const { session } = await person();
    const { session: mine, authenticator } = await register(session);
    const options = await signInOptions(mine);
    const res = await t.call('POST', '/auth/step-up/verify', { method: 'passkey', credential: authenticator.get(options, t.url) }, { session: mine });
    expectError(res, 400, 'challenge_expired');
  });

  it('409 conflict: a passkey proof from a person without one', async () => {
    const { session } = await person();
    const stranger = new SoftAuthenticator();
    stranger.create({ rp: { id: 'localhost' }, user: { id: 'AAAA' }, challenge: 'x' }, t.url);
    const credential = stranger.get(await signInOptions(session), t.url);
    const res = await t.call('POST', '/auth/mfa/verify', { method: 'passkey', credential }, { session });
    expectError(res, 409, 'conflict');
  });
});
