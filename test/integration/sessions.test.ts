import { hashSecret } from '../../src/lib/crypto';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const DAY_MS = 24 * 3600_000;
const cookieOf = (session: string) => ({ cookie: `__Host-cp_session=${session}` });

async function lastSeen(session: string, at: Date) {
  await t.db.updateTable('sessions').set({ last_seen_at: at }).where('token_hash', '=', hashSecret(session)).execute();
}

describe('logOut', () => {
  it('ends the caller’s session at once and clears the cookie; the person’s other sessions stay signed in', async () => {
    const { ownerId } = await t.factories.org();
    const laptop = await t.factories.session(ownerId);
    const phone = await t.factories.session(ownerId);

    const res = await t.call('POST', '/auth/logout', undefined, { session: laptop });
    expect(res.status).toBe(204);
    expect(res.headers.get('set-cookie')).toBe('__Host-cp_session=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0');

    expectError(await t.call('GET', '/user/me', undefined, { session: laptop }), 401, 'invalid_token');
    expectError(await t.call('POST', '/auth/logout', undefined, { session: laptop }), 401, 'invalid_token');
    expect((await t.call('GET', '/user/me', undefined, { session: phone })).status).toBe(200);
  });

  it('sends a browser’s log-out form (Accept: text/html) to the sign-in page with 303', async () => {
    const { ownerId } = await t.factories.org();
    const session = await t.factories.session(ownerId);
    const res = await t.call('POST', '/auth/logout', undefined, { session, headers: { accept: 'text/html,application/xhtml+xml' } });
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`${t.url}/sign-in`);
    expect(res.headers.get('set-cookie')).toBe('__Host-cp_session=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0');
    expectError(await t.call('GET', '/user/me', undefined, { session }), 401, 'invalid_token');
  });

  it('refuses an API token with 403 requires_person', async () => {
    const { token } = await t.factories.org();
    expectError(await t.call('POST', '/auth/logout', undefined, { token }), 403, 'requires_person');
  });
});

describe('a change made with the session cookie must come from a page of this service', () => {
  it('refuses Sec-Fetch-Site: cross-site with 403 insufficient_access and changes nothing', async () => {
    const { ownerId } = await t.factories.org();
    const session = await t.factories.session(ownerId);
    const res = await t.call('POST', '/auth/logout', undefined, { headers: { ...cookieOf(session), 'sec-fetch-site': 'cross-site' } });
    expectError(res, 403, 'insufficient_access');
    expect((await t.call('GET', '/user/me', undefined, { session })).status).toBe(200);
  });

  it('refuses a foreign Origin, even one of the same site (a sibling subdomain)', async () => {
    const { ownerId } = await t.factories.org();
    const session = await t.factories.session(ownerId);
    for (const origin of ['https://evil.example', 'http://attacker.localhost', 'null']) {
      const res = await t.call('POST', '/auth/logout', undefined, { headers: { ...cookieOf(session), origin, 'sec-fetch-site': 'same-site' } });
      expectError(res, 403, 'insufficient_access');
    }
    expect((await t.call('GET', '/user/me', undefined, { session })).status).toBe(200);
  });

  it('accepts a change from this server’s own pages, and reads from anywhere', async () => {
    const { ownerId } = await t.factories.org();
    const session = await t.factories.session(ownerId);
    const elsewhere = { ...cookieOf(session), origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' };
    // A cross-site GET changes nothing; SameSite=Lax lets top-level navigations carry the cookie.
    expect((await t.call('GET', '/user/me', undefined, { headers: elsewhere })).status).toBe(200);
    const own = { ...cookieOf(session), origin: new URL(t.url).origin, 'sec-fetch-site': 'same-origin' };
    expect((await t.call('POST', '/auth/logout', undefined, { headers: own })).status).toBe(204);
  });

  it('accepts Origin: null from a page of ours (a no-referrer page) only when Sec-Fetch-Site vouches for it', async () => {
    const { ownerId } = await t.factories.org();
    const session = await t.factories.session(ownerId);
    expectError(await t.call('POST', '/auth/logout', undefined, { headers: { ...cookieOf(session), origin: 'null' } }), 403, 'insufficient_access');
    const res = await t.call('POST', '/auth/logout', undefined, { headers: { ...cookieOf(session), origin: 'null', 'sec-fetch-site': 'same-origin' } });
    expect(res.status).toBe(204);
  });

  it('leaves bearer credentials alone: a foreign Origin with an API token is not a misled browser', async () => {
    const { orgId, token } = await t.factories.org();
    const res = await t.call(
      'POST',
      '/team',
      { name: 'Platform' },
      { token, org: orgId, headers: { origin: 'https://ci.example', 'sec-fetch-site': 'cross-site' } },
    );
    expect(res.status).toBe(201);
  });
});

describe('session lifetime', () => {
  it('ends a session after 14 days without use, and keeps one used within them', async () => {
    const { ownerId } = await t.factories.org();
    const idle = await t.factories.session(ownerId);
    const used = await t.factories.session(ownerId);
    await lastSeen(idle, new Date(Date.now() - 14 * DAY_MS - 60_000));
    await lastSeen(used, new Date(Date.now() - 13 * DAY_MS));

    const refused = await t.call('GET', '/user/me', undefined, { session: idle });
    expectError(refused, 401, 'invalid_token');
    expect(refused.body.detail).toMatch(/14 days without use/);
    expect((await t.call('GET', '/user/me', undefined, { session: used })).status).toBe(200);
  });

  it('ends a session at its hard end (30 days after sign-in) however much it is used', async () => {
    const { ownerId } = await t.factories.org();
    const session = await t.factories.session(ownerId);
    const row = await t.db.selectFrom('sessions').select(['created_at', 'expires_at']).where('token_hash', '=', hashSecret(session)).executeTakeFirstOrThrow();
    expect(row.expires_at.getTime() - row.created_at.getTime()).toBeGreaterThanOrEqual(30 * DAY_MS - 5_000);
    expect(row.expires_at.getTime() - row.created_at.getTime()).toBeLessThanOrEqual(30 * DAY_MS + 5_000);

    await t.db
      .updateTable('sessions')
      .set({ expires_at: new Date(Date.now() - 1000), last_seen_at: new Date() })
      .where('token_hash', '=', hashSecret(session))
      .execute();
    expectError(await t.call('GET', '/user/me', undefined, { session }), 401, 'invalid_token');
  });
});
