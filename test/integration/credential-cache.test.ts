// What the server remembers of credentials (src/identity/credential-cache.ts), in one process:
// it is used, it never outlives a credential's expiry, and a write the server commits to a
// table credentials are read from forgets at once, before its response leaves (other writes
// leave it). The notification path between processes is
// tested in test/db/credential-cache.test.ts.
import { sql } from 'kysely';
import { CREDENTIALS_CHANNEL } from '../../src/identity/credential-cache';
import { startTestApp, type TestApp } from '../support/app';

const LIST = '/notification-destination';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** A change committed with triggers off (replica mode): nobody is told of it. */
async function unannounced(change: (db: TestApp['database']['db']) => Promise<unknown>): Promise<void> {
  await t.database.db.transaction().execute(async (trx) => {
    await sql`set local session_replication_role = replica`.execute(trx);
    await change(trx as unknown as TestApp['database']['db']);
  });
}

/**
 * Waits until the notifications of everything committed so far (the test's own setup
 * included) have reached the app: they arrive in commit order, so one sent now marks the end.
 * Without it a late one can empty the cache after a test primed it.
 */
async function announcedSoFar(): Promise<void> {
  const before = t.credentials.clears;
  await sql`select pg_notify(${CREDENTIALS_CHANNEL}, 'test: announced so far')`.execute(t.database.db);
  const deadline = Date.now() + 10_000;
  while (t.credentials.clears === before) {
    if (Date.now() > deadline) throw new Error('No change notification reached the app within 10 s.');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

it('answers a remembered token without asking again, until something changes', async () => {
  const { orgId, token } = await t.factories.org();
  const client = t.as({ token, org: orgId });
  await announcedSoFar();
  expect((await client.get(LIST)).status).toBe(200);
  const tokenId = await t.factories.tokenId(token);
  await unannounced((db) => db.updateTable('api_tokens').set({ revoked_at: new Date() }).where('id', '=', tokenId).execute());
  // Remembered: the unannounced revocation is not seen (this is what the notification is for).
  expect((await client.get(LIST)).status).toBe(200);
  expect((await client.get('/user/me')).status).toBe(200);
});

it('forgets at once when a request of its own commits a write to what credentials are read from, before that response leaves', async () => {
  const { orgId, token } = await t.factories.org();
  const client = t.as({ token, org: orgId });
  await announcedSoFar();
  expect((await client.get(LIST)).status).toBe(200);
  const tokenId = await t.factories.tokenId(token);
  await unannounced((db) => db.updateTable('api_tokens').set({ revoked_at: new Date() }).where('id', '=', tokenId).execute());
  // A write that touches none of the credential tables leaves what is remembered as it is.
  const created = await client.post(LIST, { name: 'Ops', type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] });
  expect(created.status).toBe(201);
  expect((await client.get(LIST)).status).toBe(200);
  // A role is: everything is forgotten.
  expect((await client.post('/role', { name: 'Viewer of roles', permissions: ['role:view'] })).status).toBe(201);
  const refused = await client.get(LIST);
  expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 401, code: 'invalid_token' });
});

it('never serves a remembered token past its expiry', async () => {
  const { orgId, ownerId } = await t.factories.org();
  const token = await t.factories.token(orgId, ownerId, undefined, { expiresAt: new Date(Date.now() + 1_500) });
  const client = t.as({ token, org: orgId });
  expect((await client.get(LIST)).status).toBe(200);
  await new Promise((r) => setTimeout(r, 1_600));
  const refused = await client.get(LIST);
  expect({ status: refused.status, code: refused.body.code, detail: refused.body.detail }).toEqual({
    status: 401,
    code: 'invalid_token',
    detail: 'The API token has expired.',
  });
});

it('remembers a person’s standing in an organization for sessions, and forgets it on a write', async () => {
  const { orgId, ownerId } = await t.factories.org();
  const session = await t.factories.session(ownerId);
  const token = await t.factories.token(orgId, await t.factories.member(orgId, { roles: ['admin'] }));
  const bySession = t.as({ session, org: orgId });
  await announcedSoFar();
  expect((await bySession.get(LIST)).status).toBe(200);
  await unannounced((db) => db.deleteFrom('role_assignments').where('org_id', '=', orgId).where('user_id', '=', ownerId).execute());
  expect((await bySession.get(LIST)).status).toBe(200);
  // Another credential's write in this process to a credential table (a team is not one): everything is forgotten.
  expect((await t.as({ token, org: orgId }).post('/team', { name: 'Not a credential' })).status).toBe(201);
  expect((await bySession.get(LIST)).status).toBe(200);
  expect((await t.as({ token, org: orgId }).post('/role', { name: 'Viewer of roles', permissions: ['role:view'] })).status).toBe(201);
  const refused = await bySession.get(LIST);
  expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 403, code: 'missing_permission' });
});

it('remembers nothing when CREDENTIAL_CACHE_SECONDS is 0', async () => {
  const uncached = await startTestApp({ env: { CREDENTIAL_CACHE_SECONDS: '0' } });
  try {
    const { orgId, token } = await uncached.factories.org();
    const client = uncached.as({ token, org: orgId });
    expect((await client.get(LIST)).status).toBe(200);
    const tokenId = await uncached.factories.tokenId(token);
    await uncached.database.db.updateTable('api_tokens').set({ revoked_at: new Date() }).where('id', '=', tokenId).execute();
    expect((await client.get(LIST)).status).toBe(401);
    expect(uncached.credentials.size).toBe(0);
  } finally {
    await uncached.close();
  }
});
