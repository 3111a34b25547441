// Every migration goes up, down and up again on an empty database, on the embedded database
// and on a PostgreSQL server (make test runs this folder on both); one that fails is rolled
// back whole, named, and leaves no lock behind.
import { NO_MIGRATIONS, sql } from 'kysely';
import { migrateToLatest, migrator, type DatabaseHandle } from '../../src/db/database';
import { loadMigrations, MIGRATION_NAME } from '../../src/db/migrations';
import { emptyDatabase } from '../support/database';

let database: DatabaseHandle;
beforeAll(async () => {
  database = await emptyDatabase();
});
afterAll(() => database.close());

const tables = async () =>
  (
    await sql<{
      name: string;
    }>`select table_name as name from information_schema.tables where table_schema = 'public' and table_name not like 'kysely_%' order by 1`.execute(
      database.db,
    )
  ).rows.map((r) => r.name);

it('names every migration by date, in the order written', () => {
  const names = Object.keys(loadMigrations());
  expect(names.length).toBeGreaterThan(3);
  for (const name of names) expect(name).toMatch(MIGRATION_NAME);
  expect([...names].sort()).toEqual(names);
});

it('migrates an empty database up, all the way down, and up again', async () => {
  const all = Object.keys(loadMigrations());
  expect(await migrateToLatest(database.db)).toEqual(all);
  const built = await tables();
  expect(built).toEqual(expect.arrayContaining(['organizations', 'users', 'audit_log', 'outbox']));

  const down = await migrator(database.db).migrateTo(NO_MIGRATIONS);
  expect(down.error).toBeUndefined();
  expect(down.results?.map((r) => r.migrationName)).toEqual([...all].reverse());
  expect(await tables()).toEqual([]);

  expect(await migrateToLatest(database.db)).toEqual(all);
  expect(await tables()).toEqual(built);
});

it('rolls back a failing migration with those before it, names it, and lets go of the lock', async () => {
  const all = Object.keys(loadMigrations());
  const failing = await emptyDatabase();
  try {
    // The first migration creates organizations: with the table already there, it fails.
    await sql`create table organizations (id text)`.execute(failing.db);
    await expect(migrateToLatest(failing.db)).rejects.toThrow(`Migration ${all[0]} failed: relation "organizations" already exists`);
    const held = await sql<{ n: number }>`
      select count(*)::int as n from pg_locks
      where locktype = 'advisory' and database = (select oid from pg_database where datname = current_database())`.execute(failing.db);
    expect(held.rows[0]?.n).toBe(0);
    const left = await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = 'public'`.execute(failing.db);
    expect(left.rows.map((r) => r.name)).toEqual(['organizations']);

    await sql`drop table organizations`.execute(failing.db);
    expect(await migrateToLatest(failing.db)).toEqual(all);
  } finally {
    await failing.close();
  }
});
