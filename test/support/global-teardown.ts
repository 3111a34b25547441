import { readFileSync, rmSync } from 'node:fs';
import pg from 'pg';
import { PG_TEMPLATE_FILE, PGLITE_TEMPLATE, serverUrl } from './database';

export default async function globalTeardown(): Promise<void> {
  rmSync(PGLITE_TEMPLATE, { force: true });
  const url = serverUrl();
  if (!url) return;
  const template = readFileSync(PG_TEMPLATE_FILE, 'utf8').trim();
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`drop database if exists ${template} with (force)`);
  } finally {
    await admin.end();
  }
  rmSync(PG_TEMPLATE_FILE, { force: true });
}
