// Every migration goes up, down and up again on an empty database, on the embedded database
// and on a PostgreSQL server (make test runs this folder on both).
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
