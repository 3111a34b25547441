import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { migrateToLatest, openDatabase } from '../../src/db/database';
import { projectRoot } from '../../src/spec';
import { EMPTY_TEMPLATE_ENV, PGLITE_TEST_START_PARAMS, RUN_ENV, TEMPLATE_DIR, TEMPLATE_ENV, onServer, serverUrl, withDatabase } from './database';

/** Migrates one template database; every test file starts from a copy of it. */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Every file under a directory, sorted, so that the hash does not depend on the listing order. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      return statSync(path).isDirectory() ? filesUnder(path) : [path];
    });
}

/**
 * What a migrated PGlite template depends on: the database code and migrations (src/db) and
 * the installed packages (the lock file: PGlite's version, Kysely's). Templates whose key
 * matches are reused by later runs instead of running initdb and every migration again.
 */
function templateKey(files: string[]): string {
  const hash = createHash('sha256');
  for (const file of files) hash.update(relative(projectRoot, file)).update('\0').update(readFileSync(file)).update('\0');
  return hash.digest('hex').slice(0, 16);
}

/**
 * Builds a template data directory under a temporary name, closes its PGlite (a clean
 * shutdown: copies start without recovery), then renames it: a concurrent run never sees half
 * a directory, and one that lost the race keeps the other's.
 */
async function buildTemplate(dir: string, from: string | null, prepare: (pglite: PGlite) => Promise<void>): Promise<void> {
  if (existsSync(dir)) return;
  const partial = `${dir}.${process.pid}.partial`;
  rmSync(partial, { recursive: true, force: true });
  if (from) cpSync(from, partial, { recursive: true });
  const pglite = await PGlite.create({ dataDir: partial, startParams: PGLITE_TEST_START_PARAMS });
  try {
    await prepare(pglite);
  } finally {
    if (!pglite.closed) await pglite.close();
  }
  try {
    renameSync(partial, dir);
  } catch (err) {
    if (!existsSync(dir)) throw err;
    rmSync(partial, { recursive: true, force: true });
  }
}

async function pgliteTemplates(): Promise<{ migrated: string; empty: string }> {
  const lock = join(projectRoot, 'package-lock.json');
  const empty = join(TEMPLATE_DIR, `pglite-empty-${templateKey([lock])}`);
  const migrated = join(
    TEMPLATE_DIR,
    `pglite-template-${templateKey([lock, join(projectRoot, 'test', 'support', 'global-setup.ts'), ...filesUnder(join(projectRoot, 'src', 'db'))])}`,
  );
  await buildTemplate(empty, null, async () => undefined);
  await buildTemplate(migrated, empty, async (pglite) => {
    const handle = await openDatabase({ pglite });
    await migrateToLatest(handle.db);
    await handle.db.destroy();
  });
  return { migrated, empty };
}

export default async function globalSetup(): Promise<void> {
  mkdirSync(TEMPLATE_DIR, { recursive: true });
  process.env[RUN_ENV] = `${process.pid}-${Date.now()}`;
  const url = serverUrl();
  if (!url) {
    const { migrated, empty } = await pgliteTemplates();
    process.env[TEMPLATE_ENV] = migrated;
    process.env[EMPTY_TEMPLATE_ENV] = empty;
    return;
  }
  const template = `cp_test_template_${process.pid}`;
  await onServer(url, async (admin) => {
    // Templates of earlier runs that died before their teardown (their process is gone).
    const stale = await admin.query<{ datname: string }>(`select datname from pg_database where datname like 'cp_test_template_%'`);
    for (const { datname } of stale.rows) {
      const pid = Number(datname.slice('cp_test_template_'.length));
      if (!processAlive(pid)) await admin.query(`drop database if exists ${datname} with (force)`);
    }
    await admin.query(`create database ${template}`);
  });
  const handle = await openDatabase({ url: withDatabase(url, template), poolSize: 1 });
  await migrateToLatest(handle.db);
  await handle.close();
  process.env[TEMPLATE_ENV] = template;
}
