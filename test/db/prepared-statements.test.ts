// Named prepared statements are a setting: on by default (each connection plans a statement
// once), off behind a pooler that moves transactions between server connections.
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { loadConfig } from '../../src/config';
import { openDatabase } from '../../src/db/database';
import { serverDatabase, serverUrl, templateName } from '../support/database';

const url = serverUrl();
const onServerOnly = url ? it : it.skip;

it('is on unless DATABASE_PREPARED_STATEMENTS=false', () => {
  const key = randomBytes(32).toString('hex');
  expect(loadConfig({ ENCRYPTION_KEY: key }).databasePreparedStatements).toBe(true);
  expect(loadConfig({ ENCRYPTION_KEY: key, DATABASE_PREPARED_STATEMENTS: 'false' }).databasePreparedStatements).toBe(false);
});

onServerOnly('names the statements it sends only when on', async () => {
  const server = await serverDatabase(url!, 'prepared', templateName());
  try {
    for (const preparedStatements of [true, false]) {
      const database = await openDatabase({ url: server.url, poolSize: 1, preparedStatements });
      try {
        const prepared = await database.db.connection().execute(async (connection) => {
          await connection.selectFrom('organizations').select('id').where('slug', '=', 'nothing').execute();
          return (await sql<{ count: number }>`select count(*)::int as count from pg_prepared_statements`.execute(connection)).rows[0]!.count;
        });
        expect([preparedStatements, prepared > 0]).toEqual([preparedStatements, preparedStatements]);
      } finally {
        await database.close();
      }
    }
  } finally {
    await server.drop();
  }
});
