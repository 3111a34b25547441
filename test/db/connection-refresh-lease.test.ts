// A connection's refresh lease (src/mcp/upstream/credentials.ts): one refresher at a time,
// whichever replica, for a bounded time; and bookkeeping, so that taking and giving it back
// neither moves `updated_at` nor makes any server forget the tools its MCP servers serve.
import { sql } from 'kysely';
import type { DatabaseHandle } from '../../src/db/database';
import { releaseRefreshLease, storeRefreshedCredentials, takeRefreshLease } from '../../src/areas/connections';
import { newId } from '../../src/lib/ids';
import { freshDatabase } from '../support/database';
import { Factories } from '../support/factories';

let database: DatabaseHandle;
let factories: Factories;
beforeAll(async () => {
  database = await freshDatabase();
  factories = new Factories(database.db);
});
afterAll(() => database.close());

async function connection(): Promise<{ orgId: string; id: string }> {
  const { orgId, ownerId } = await factories.org();
  const id = newId('connection');
  await database.db
    .insertInto('connections')
    .values({ id, org_id: orgId, connector_slug: 'acme', owner_user_id: ownerId, name: 'Acme', status: 'active', auth_type: 'oauth2', credentials_enc: 'old' })
    .execute();
  return { orgId, id };
}

const row = (id: string) =>
  database.db.selectFrom('connections').select(['credentials_enc', 'refresh_lease_until', 'updated_at']).where('id', '=', id).executeTakeFirstOrThrow();

it('is held by one refresher until given back', async () => {
  const { orgId, id } = await connection();
  const first = await takeRefreshLease(database.db, orgId, id, 60_000);
  expect(first?.row.id).toBe(id);
  expect(await takeRefreshLease(database.db, orgId, id, 60_000)).toBeUndefined();
  await releaseRefreshLease(database.db, id, first!.lease);
  expect((await row(id)).refresh_lease_until).toBeNull();
  expect(await takeRefreshLease(database.db, orgId, id, 60_000)).toBeDefined();
});

it('can be taken by another refresher once it ran out, and the one it ran out on gives back nothing of theirs', async () => {
  const { orgId, id } = await connection();
  const lapsed = await takeRefreshLease(database.db, orgId, id, 1);
  await new Promise((resolve) => setTimeout(resolve, 20));
  const next = await takeRefreshLease(database.db, orgId, id, 60_000);
  expect(next).toBeDefined();
  await releaseRefreshLease(database.db, id, lapsed!.lease);
  expect((await row(id)).refresh_lease_until).toEqual(next!.lease);
});

it('is given back with the refreshed tokens; other credentials stored meanwhile stay', async () => {
  const { orgId, id } = await connection();
  const taken = await takeRefreshLease(database.db, orgId, id, 60_000);
  expect(await storeRefreshedCredentials(database.db, id, 'old', 'new', taken!.lease)).toBe(true);
  expect(await row(id)).toMatchObject({ credentials_enc: 'new', refresh_lease_until: null });
  const again = await takeRefreshLease(database.db, orgId, id, 60_000);
  expect(await storeRefreshedCredentials(database.db, id, 'old', 'newer', again!.lease)).toBe(false);
  expect((await row(id)).credentials_enc).toBe('new');
});

it('is bookkeeping: updated_at stays, and no server is told to forget the served tools', async () => {
  const leased = await connection();
  const fence = await connection();
  const heard: string[] = [];
  const stop = await database.listen('cp_served_tools', (payload) => heard.push(payload));
  try {
    const before = (await row(leased.id)).updated_at;
    const taken = await takeRefreshLease(database.db, leased.orgId, leased.id, 60_000);
    await releaseRefreshLease(database.db, leased.id, taken!.lease);
    expect((await row(leased.id)).updated_at).toEqual(before);
    // Notifications arrive in commit order: once the fence's is heard, one for the lease would have been.
    await sql`update connections set scopes = '{fence}' where id = ${fence.id}`.execute(database.db);
    for (let waited = 0; !heard.includes(fence.orgId) && waited < 10_000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(heard).toContain(fence.orgId);
    expect(heard).not.toContain(leased.orgId);
  } finally {
    await stop();
  }
});
