import { readFileSync, rmSync } from 'node:fs';
import { PG_TEMPLATE_FILE, PGLITE_TEMPLATE, onServer, serverUrl } from './database';

export default async function globalTeardown(): Promise<void> {
  rmSync(PGLITE_TEMPLATE, { force: true });
  const url = serverUrl();
  if (!url) return;
  const template = readFileSync(PG_TEMPLATE_FILE, 'utf8').trim();
  await onServer(url, (admin) => admin.query(`drop database if exists ${template} with (force)`));
  rmSync(PG_TEMPLATE_FILE, { force: true });
}
