import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { migrateToLatest, openDatabase } from '../../src/db/database';
import { TEMPLATE_DIR, TEMPLATE_ENV, onServer, serverUrl, withDatabase } from './database';

/** Migrates one template database; every test file starts from a copy of it. */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export default async function globalSetup(): Promise<void> {
  mkdirSync(TEMPLATE_DIR, { recursive: true });
  const url = serverUrl();
  if (!url) {
    const pglite = await PGlite.create();
    const handle = await openDatabase({ pglite });
    await migrateToLatest(handle.db);
    const dump = await pglite.dumpDataDir('gzip');
    const file = join(TEMPLATE_DIR, `pglite-template-${process.pid}.tar.gz`);
    writeFileSync(file, Buffer.from(await dump.arrayBuffer()));
    await handle.close();
    process.env[TEMPLATE_ENV] = file;
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
