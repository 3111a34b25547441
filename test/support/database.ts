import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { openDatabase, type DatabaseHandle } from '../../src/db/database';
import { projectRoot } from '../../src/spec';

/**
 * Where global setup leaves the migrated template: a PGlite data-dir dump, or the name of a
 * template database. Named per run (global setup passes the name to the workers through the
 * environment), so that two test runs at once do not remove each other's template.
 */
export const TEMPLATE_DIR = join(projectRoot, '.test-results');
export const TEMPLATE_ENV = 'CP_TEST_TEMPLATE';

export function templateName(): string {
  const name = process.env[TEMPLATE_ENV];
  if (!name) throw new Error('No test database template; run the tests through jest (global setup builds it).');
  return name;
}

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

/** A database of its own on the server (a copy of `template` when given), and how to drop it. */
export async function serverDatabase(url: string, prefix: string, template?: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `cp_test_${prefix}_${randomBytes(6).toString('hex')}`;
  await onServer(url, (admin) => admin.query(`create database ${name}${template ? ` template ${template}` : ''}`));
  return { url: withDatabase(url, name), drop: () => onServer(url, (admin) => admin.query(`drop database if exists ${name} with (force)`)).then(() => undefined) };
}

async function openServerDatabase(url: string, prefix: string, template: string | undefined, poolSize: number): Promise<DatabaseHandle> {
  const database = await serverDatabase(url, prefix, template);
  const handle = await openDatabase({ url: database.url, poolSize });
  return {
    ...handle,
    close: async () => {
      await handle.close();
      await database.drop();
    },
  };
}

/**
 * A fresh, migrated database for one test file: a PGlite loaded from the template dump, or a
 * PostgreSQL database cloned from the template database (CREATE DATABASE … TEMPLATE).
 */
export async function freshDatabase(): Promise<DatabaseHandle> {
  const url = serverUrl();
  if (!url) return openDatabase({ pglite: await PGlite.create({ loadDataDir: new Blob([readFileSync(templateName())]) }) });
  return openServerDatabase(url, 'file', templateName(), 5);
}

/** An empty database, with no migration applied: in-memory PGlite, or a new database on the server. */
export async function emptyDatabase(): Promise<DatabaseHandle> {
  const url = serverUrl();
  if (!url) return openDatabase({ pglite: await PGlite.create() });
  return openServerDatabase(url, 'empty', undefined, 2);
}
