import { generate } from 'otplib';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { usePeers } from '../support/peers';

/**
 * Security events: what happens to a person's sign-in protection is in their own security
 * log, in the audit log of each organization they belong to, and (for factor changes) in an
 * email to them. A real SMTP server on loopback receives the mail.
 */
const peers = usePeers();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
});
afterAll(() => t.close());

const sessionIn = (res: { headers: Headers }) => /^__Host-cp_session=([^;]+);/.exec(res.headers.get('set-cookie') ?? '')?.[1];
const codeAt = (secret: string, offset = 0) => generate({ secret, epoch: Math.floor(Date.now() / 1000) + offset * 30 });

async function person() {
  const email = `sec.${Date.now()}.${Math.random().toString(36).slice(2)}@example.com`;
  const userId = await t.factories.user({ email });
  const { orgId, token } = await t.factories.org();
  await t.factories.member(orgId, { userId });
  return { email, userId, orgId, ownerToken: token, session: await t.factories.session(userId) };
}

async function mailsTo(to: string, subject: string, count: number) {
  for (let waited = 0; waited < 5000; waited += 25) {
    const found = peers.smtp.messages.filter((m) => m.to.includes(to) && m.raw.replace(/=\r?\n/g, '').includes(subject));
    if (found.length >= count) return found;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`fewer than ${count} emails "${subject}" to ${to}`);
}

const events = async (session: string) => (await t.call('GET', '/user/me/security-events', undefined, { session })).body.data as any[];

it('records sign-in, factor changes, wrong codes and recovery codes for the person and in their organizations’ audit logs; factor changes email them', async () => {
  const { email, userId, orgId, ownerToken, session } = await person();

  // Sign in by emailed link.
  await t.call('POST', '/auth/magic-link', { email });
  let token = '';
  for (let waited = 0; waited < 5000 && !token; waited += 25) {
    const mail = peers.smtp.messages.find((m) => m.to.includes(email));
    token = mail
      ? (/token=3D([A-Za-z0-9_-]+)|token=([A-Za-z0-9_-]+)/
          .exec(mail.raw.replace(/=\r?\n/g, ''))
          ?.slice(1)
          .find(Boolean) ?? '')
      : '';
    if (!token) await new Promise((resolve) => setTimeout(resolve, 25));
  }
  const signedIn = await t.call('POST', '/auth/magic-link/verify', undefined, {
    raw: new URLSearchParams({ token }).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'security-test/1.0' },
  });
  expect(sessionIn(signedIn)).toBeDefined();

  // TOTP on, a wrong code, a recovery code used, new codes, TOTP off.
  const begun = await t.call('POST', '/user/me/mfa/totp', undefined, { session });
  const verified = await t.call('POST', '/user/me/mfa/totp/verify', { code: await codeAt(begun.body.secret) }, { session });
  let current = sessionIn(verified)!;
  expectError(await t.call('POST', '/auth/mfa/verify', { method: 'totp', code: '000000' }, { session: current }), 400, 'verification_failed');
  current = sessionIn(await t.call('POST', '/auth/mfa/verify', { method: 'recovery_code', code: verified.body.recovery_codes[0] }, { session: current }))!;
  current = sessionIn(await t.call('POST', '/auth/step-up/verify', { method: 'totp', code: await codeAt(begun.body.secret, 1) }, { session: current }))!;
  expect((await t.call('POST', '/user/me/mfa/recovery-codes/regenerate', undefined, { session: current })).status).toBe(200);
  expect((await t.call('DELETE', '/user/me/mfa/totp', undefined, { session: current })).status).toBe(204);

  const seen = await events(current);
  expect(seen.map((e) => [e.type, e.method])).toEqual([
    ['factor_removed', 'totp'],
    ['recovery_codes_regenerated', null],
    ['recovery_code_used', null],
    ['second_factor_failed', 'totp'],
    ['factor_added', 'totp'],
    ['signed_in', 'magic_link'],
  ]);
  expect(seen.at(-1)).toMatchObject({ user_agent: 'security-test/1.0' });

  // The organization's administrators see the same in its audit log.
  const audit = await t.call('GET', '/audit-log?limit=100', undefined, { token: ownerToken, org: orgId });
  const mine = audit.body.data.filter((e: any) => e.target?.id === userId).map((e: any) => e.action);
  expect(mine).toEqual(
    expect.arrayContaining([
      'member.signed_in',
      'member.factor_added',
      'member.second_factor_failed',
      'member.recovery_code_used',
      'member.recovery_codes_regenerated',
      'member.factor_removed',
    ]),
  );

  // Adding and removing a factor and new recovery codes are told to the person.
  await mailsTo(email, 'On your MCP control plane account', 3);
});

it('pages newest first', async () => {
  const { userId, session } = await person();
  await t.db
    .insertInto('security_events')
    .values(
      [1, 2, 3].map((i) => ({
        id: `sev_01jg3b7f0s1d5f9g3h7j2k6n4${'abc'[i - 1]}`,
        user_id: userId,
        type: 'signed_in' as const,
        method: `m${i}`,
      })),
    )
    .execute();
  const first = await t.call('GET', '/user/me/security-events?limit=2', undefined, { session });
  expect(first.body.data.map((e: any) => e.method)).toEqual(['m3', 'm2']);
  const second = await t.call('GET', `/user/me/security-events?limit=2&cursor=${first.body.next_cursor}`, undefined, { session });
  expect(second.body).toEqual({ data: [expect.objectContaining({ method: 'm1' })], next_cursor: null });
  expectError(await t.call('GET', '/user/me/security-events?cursor=bm90LWFuLWlk', undefined, { session }), 400, 'invalid_cursor');
});

it('403 requires_person for an API token', async () => {
  const { ownerToken } = await person();
  expectError(await t.call('GET', '/user/me/security-events', undefined, { token: ownerToken }), 403, 'requires_person');
});
