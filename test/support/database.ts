import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite, type PGliteOptions } from '@electric-sql/pglite';
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
/** The empty (initdb'd, unmigrated) PGlite data directory global setup leaves, for emptyDatabase(). */
export const EMPTY_TEMPLATE_ENV = 'CP_TEST_EMPTY_TEMPLATE';
/** Names this run (its events-seen file): templates are shared between runs, so their names cannot. */
export const RUN_ENV = 'CP_TEST_RUN';

/**
 * PGlite's start parameters for tests: its defaults, with 16 MB of shared buffers instead of
 * 128 MB (a test database holds a few hundred rows; starting with 128 MB cost about a quarter
 * of each PGlite's start, and every test file starts at least one).
 */
export const PGLITE_TEST_START_PARAMS = [
  '--single',
  '-F',
  '-O',
  '-j',
  '-c',
  'search_path=public',
  '-c',
  'exit_on_error=false',
  '-c',
  'log_checkpoints=false',
  '-c',
  'max_worker_processes=0',
  '-c',
  'max_parallel_workers=0',
  '-c',
  'max_parallel_workers_per_gather=0',
  '-c',
  'shared_buffers=16MB',
];

/** Where copies of the template live while a test file runs: memory (/dev/shm) when there is one. */
export function scratchRoot(): string {
  return existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
}
export const SCRATCH_PREFIX = 'cp-test-pglite-';

/**
 * A database on a PGlite started on a copy of a template data directory global setup left
 * (closed cleanly). PGlite reads a directory on disk as it needs it; loading a dump instead
 * untarred its 40 MB into memory first, which took four to five times as long as copying the
 * directory and starting. Closing the handle removes the copy.
 */
export async function pgliteFrom(template: string, options: PGliteOptions = {}): Promise<DatabaseHandle> {
  const dataDir = mkdtempSync(join(scratchRoot(), `${SCRATCH_PREFIX}${process.env[RUN_ENV] ?? 'run'}-`));
  const remove = () => rmSync(dataDir, { recursive: true, force: true });
  try {
    cpSync(template, dataDir, { recursive: true });
    const handle = await openDatabase({ pglite: await PGlite.create({ dataDir, startParams: PGLITE_TEST_START_PARAMS, ...options }) });
    return {
      ...handle,
      close: async () => {
        try {
          await handle.close();
        } finally {
          remove();
        }
      },
    };
  } catch (err) {
    remove();
    throw err;
  }
}

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
  return {
    url: withDatabase(url, name),
    drop: () => onServer(url, (admin) => admin.query(`drop database if exists ${name} with (force)`)).then(() => undefined),
  };
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
  if (!url) return pgliteFrom(templateName());
  return openServerDatabase(url, 'file', templateName(), 5);
}

/** An empty database, with no migration applied: in-memory PGlite, or a new database on the server. */
export async function emptyDatabase(): Promise<DatabaseHandle> {
  const url = serverUrl();
  if (!url) {
    // A copy of an initdb'd data directory (global setup's): initdb itself takes seconds.
    const empty = process.env[EMPTY_TEMPLATE_ENV];
    return empty ? pgliteFrom(empty) : openDatabase({ pglite: await PGlite.create() });
  }
  return openServerDatabase(url, 'empty', undefined, 2);
}
