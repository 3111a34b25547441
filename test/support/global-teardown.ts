import { rmSync } from 'node:fs';
import { onServer, serverUrl, templateName } from './database';

export default async function globalTeardown(): Promise<void> {
  const template = templateName();
  const url = serverUrl();
  if (!url) {
    rmSync(template, { force: true });
    return;
  }
  await onServer(url, (admin) => admin.query(`drop database if exists ${template} with (force)`));
}
