import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { openDatabase, type DatabaseHandle } from '../../src/db/database';
import { projectRoot } from '../../src/spec';

/** Where global setup leaves the migrated template (a PGlite data dir dump, or a database name). */
export const TEMPLATE_DIR = join(projectRoot, '.test-results');
export const PGLITE_TEMPLATE = join(TEMPLATE_DIR, 'pglite-template.tar.gz');
export const PG_TEMPLATE_FILE = join(TEMPLATE_DIR, 'pg-template.txt');

export function serverUrl(): string | null {
  return process.env.TEST_DATABASE_URL || null;
}

/** Runs statements on the server's maintenance connection (CREATE/DROP DATABASE cannot run in a pool transaction). */
export async function onServer<T>(url: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

export function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

/**
 * A fresh, migrated database for one test file: a PGlite loaded from the template dump, or a
 * PostgreSQL database cloned from the template database (CREATE DATABASE … TEMPLATE).
 */
export async function freshDatabase(): Promise<DatabaseHandle> {
  const url = serverUrl();
  if (!url) {
    if (!existsSync(PGLITE_TEMPLATE)) throw new Error('No PGlite template; run tests through jest (global setup builds it).');
    const blob = new Blob([readFileSync(PGLITE_TEMPLATE)]);
    const pglite = await PGlite.create({ loadDataDir: blob });
    return openDatabase({ pglite });
  }
  const template = readFileSync(PG_TEMPLATE_FILE, 'utf8').trim();
  const name = `cp_test_${randomBytes(6).toString('hex')}`;
  await onServer(url, (admin) => admin.query(`create database ${name} template ${template}`));
  const handle = await openDatabase({ url: withDatabase(url, name), poolSize: 5 });
  return {
    ...handle,
    close: async () => {
      await handle.close();
      await onServer(url, (admin) => admin.query(`drop database if exists ${name} with (force)`));
    },
  };
}
