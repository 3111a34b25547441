// A scratch PostgreSQL database per bench run, on the server at BENCH_DATABASE_URL. Kept apart
// from support.ts so that benches driving a separate server process do not load the app.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { processAlive } from '../../src/db/database';

/** The PostgreSQL server the benches that need one make their scratch database on. */
export const SERVER_URL = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';

/** Runs `run` on one connection to the database at `url`, closed after. */
export async function onDatabase<T>(url: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

/** Runs `run` on the server's maintenance database. */
export const onServer = <T>(run: (client: pg.Client) => Promise<T>): Promise<T> => onDatabase(SERVER_URL, run);

export interface ScratchDatabase {
  name: string;
  url: string;
  /** Drops it (once; later calls do nothing); a failure is reported, not thrown. */
  drop(): Promise<void>;
}

/** A database of its own for this run, after dropping those of earlier runs that died before dropping theirs. */
export async function createScratchDatabase(): Promise<ScratchDatabase> {
  const name = `cp_bench_${process.pid}_${randomBytes(4).toString('hex')}`;
  await onServer(async (admin) => {
    const stale = await admin.query<{ datname: string }>(`select datname from pg_database where datname like 'cp\\_bench\\_%'`);
    for (const { datname } of stale.rows) {
      const pid = Number(/^cp_bench_(\d+)_/.exec(datname)?.[1]);
      if (pid && !processAlive(pid)) await admin.query(`drop database if exists "${datname}" with (force)`);
    }
    await admin.query(`create database "${name}"`);
  });
  const url = new URL(SERVER_URL);
  url.pathname = `/${name}`;
  let dropped: Promise<void> | null = null;
  return {
    name,
    url: url.toString(),
    drop: () =>
      (dropped ??= onServer((admin) => admin.query(`drop database if exists "${name}" with (force)`)).then(
        () => undefined,
        (err) => void process.stderr.write(`Could not drop database ${name}: ${(err as Error).message}\n`),
      )),
  };
}
