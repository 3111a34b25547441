import { sql } from 'kysely';
import { SERVED_TOOLS_TABLES } from '../../src/mcp/served-tools';
import { CREDENTIAL_TABLES } from '../../src/identity/credential-cache';
import { WrittenTables } from '../../src/db/written-tables';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';

/*
 * After a write it commits, the app forgets only what the write may have altered: the tables
 * its statements wrote (src/db/written-tables.ts) against the tables each cache is built from,
 * which are the tables whose triggers notify the cache's channel.
 */

let t: TestApp;
let org: SeededOrg;
beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
}, 60_000);
afterAll(() => t.close());

/** The tables a statement-level or row-level trigger of these functions watches. */
async function watchedBy(functions: string[]): Promise<Set<string>> {
  const { rows } = await sql<{ relname: string }>`
    select distinct c.relname from pg_trigger t
      join pg_class c on c.oid = t.tgrelid
      join pg_proc p on p.oid = t.tgfoid
    where p.proname = any(${functions}) and not t.tgisinternal`.execute(t.database.db);
  return new Set(rows.map((r) => r.relname));
}

describe('the tables each cache is built from', () => {
  it('are the tables whose triggers notify its channel', async () => {
    expect([...(await watchedBy(['notify_credentials_changed']))].sort()).toEqual([...CREDENTIAL_TABLES].sort());
    expect([...(await watchedBy(['notify_served_tools_changed', 'notify_served_tools_changed_in_org']))].sort()).toEqual([...SERVED_TOOLS_TABLES].sort());
  });
});

describe('WrittenTables', () => {
  async function written(run: (db: TestApp['database']['db']) => Promise<unknown>): Promise<string[] | null> {
    const tables = new WrittenTables();
    await t.database.db
      .withPlugin(tables)
      .transaction()
      .execute(async (trx) => {
        await run(trx);
        // Nothing is kept: the statements only need to run.
        throw new Rollback();
      })
      .catch((err: unknown) => {
        if (!(err instanceof Rollback)) throw err;
      });
    return tables.tables === null ? null : [...tables.tables].sort();
  }
  class Rollback extends Error {}

  it('collects the tables inserts, updates and deletes write, and none for reads', async () => {
    expect(await written((db) => db.selectFrom('teams').selectAll().execute())).toEqual([]);
    expect(
      await written(async (db) => {
        await db
          .insertInto('teams')
          .values({ id: newId('team'), org_id: org.orgId, name: 'Written' })
          .execute();
        await db
          .updateTable('organizations as o')
          .set({ updated_at: sql`now()` })
          .where('o.id', '=', org.orgId)
          .execute();
        await db.deleteFrom('team_members').where('team_id', '=', 'none').execute();
      }),
    ).toEqual(['organizations', 'team_members', 'teams']);
  });

  it('finds a write inside a select (a CTE)', async () => {
    expect(
      await written((db) =>
        db
          .with('gone', (q) => q.deleteFrom('roles').where('id', '=', 'none').returning('id'))
          .selectFrom('gone')
          .selectAll()
          .execute(),
      ),
    ).toEqual(['roles']);
  });

  it('knows nothing after a raw statement: anything may have changed', async () => {
    expect(await written((db) => sql`update teams set name = name where false`.execute(db))).toBeNull();
  });
});

describe('after a write of its own', () => {
  it('keeps remembered credentials when the write touches none of their tables, and forgets them when it does', async () => {
    const api = t.as({ token: org.token, org: org.orgId });
    expect((await api.get('/user/me')).status).toBe(200);
    const before = t.credentials.clears;
    expect((await api.post('/team', { name: 'No credentials here' })).status).toBe(201);
    expect(t.credentials.clears).toBe(before);
    const role = await api.post('/role', { name: 'Reader of roles', permissions: ['role:view'] });
    expect(role.status).toBe(201);
    expect(t.credentials.clears).toBeGreaterThan(before);
  });
});
