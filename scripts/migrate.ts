// Applies pending migrations to the configured database (DATABASE_URL, or the embedded one in DATA_DIR).
import { loadConfig } from '../src/config';
import { migrateToLatest, openDatabase } from '../src/db/database';

async function main(): Promise<void> {
  const config = loadConfig();
  const database = await openDatabase({ url: config.databaseUrl, dataDir: config.dataDir, preparedStatements: config.databasePreparedStatements });
  try {
    const applied = await migrateToLatest(database.db);
    console.log(applied.length > 0 ? `Applied: ${applied.join(', ')}` : 'Already at the latest migration.');
  } finally {
    await database.close();
  }
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
