import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, Migrator, PostgresDialect, type Dialect } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import { migrations } from './migrations';
import type { Database } from './schema';

export type Db = Kysely<Database>;

export interface DatabaseHandle {
  db: Db;
  kind: 'postgres' | 'embedded';
  close(): Promise<void>;
}

// int8 (counts, counters) as numbers; the values stay far below 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

export interface DatabaseOptions {
  /** A PostgreSQL URL; without it an embedded PostgreSQL (PGlite) is used. */
  url?: string | null;
  /** Where the embedded database keeps its files; in memory when absent. */
  dataDir?: string | null;
  /** An embedded database that is already open (tests load one from a snapshot). */
  pglite?: PGlite;
  poolSize?: number;
}

export async function openDatabase(options: DatabaseOptions): Promise<DatabaseHandle> {
  if (options.url) {
    const pool = new pg.Pool({ connectionString: options.url, max: options.poolSize ?? 20, options: '-c TimeZone=UTC' });
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    return { db, kind: 'postgres', close: () => db.destroy() };
  }
  let pglite = options.pglite;
  if (!pglite) {
    if (options.dataDir) mkdirSync(options.dataDir, { recursive: true });
    pglite = await PGlite.create(options.dataDir ? join(options.dataDir, 'pgdata') : undefined);
  }
  const dialect: Dialect = new PGliteDialect(pglite);
  const db = new Kysely<Database>({ dialect });
  const owned = pglite;
  return {
    db,
    kind: 'embedded',
    close: async () => {
      await db.destroy();
      if (!owned.closed) await owned.close();
    },
  };
}

/** Brings the schema to the latest migration. Fails loudly and names the migration that broke. */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    const cause = error instanceof Error ? error.message : String(error);
    throw new Error(`Migration ${failed?.migrationName ?? ''} failed: ${cause}`);
  }
  return (results ?? []).map((r) => r.migrationName);
}
