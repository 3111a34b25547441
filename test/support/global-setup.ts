import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
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

/** Writes a dump under a temporary name, then renames it: a concurrent run never reads half a file. */
async function saveDump(pglite: PGlite, file: string): Promise<void> {
  // Checkpointed first: a copy then starts without replaying the WAL.
  await pglite.exec('checkpoint');
  // Uncompressed: every test file loads it, and gunzipping 40 MB cost each one a second.
  const dump = await pglite.dumpDataDir('none');
  const partial = `${file}.${process.pid}.partial`;
  writeFileSync(partial, Buffer.from(await dump.arrayBuffer()));
  renameSync(partial, file);
}

async function pgliteTemplates(): Promise<{ migrated: string; empty: string }> {
  const lock = join(projectRoot, 'package-lock.json');
  const emptyFile = join(TEMPLATE_DIR, `pglite-empty-${templateKey([lock])}.tar`);
  const migratedFile = join(TEMPLATE_DIR, `pglite-template-${templateKey([lock, join(projectRoot, 'test', 'support', 'global-setup.ts'), ...filesUnder(join(projectRoot, 'src', 'db'))])}.tar`);
  if (existsSync(emptyFile) && existsSync(migratedFile)) return { migrated: migratedFile, empty: emptyFile };
  const pglite = existsSync(emptyFile)
    ? await PGlite.create({ loadDataDir: new Blob([readFileSync(emptyFile)]), startParams: PGLITE_TEST_START_PARAMS })
    : await PGlite.create({ startParams: PGLITE_TEST_START_PARAMS });
  if (!existsSync(emptyFile)) await saveDump(pglite, emptyFile);
  const handle = await openDatabase({ pglite });
  await migrateToLatest(handle.db);
  await saveDump(pglite, migratedFile);
  await handle.close();
  return { migrated: migratedFile, empty: emptyFile };
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
