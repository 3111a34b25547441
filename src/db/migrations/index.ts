import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Migration } from 'kysely';

/**
 * Every migration in this folder, by file name: a new one is a new file (`make migration
 * name=…`), listed nowhere. Landed names are recorded in deployed databases and never change.
 * New names start with a UTC timestamp (YYYY_MM_DD_HHMMSS) so that two branches never take
 * the same name and the order is the order they were written in. Works from the TypeScript
 * sources (tsx, Jest) and from the compiled build alike.
 */
export const MIGRATION_NAME = /^\d{4}_\d{2}_\d{2}_(?:\d{4}|\d{6})_[a-z0-9_]+$/;

export function loadMigrations(dir: string = __dirname): Record<string, Migration> {
  const migrations: Record<string, Migration> = {};
  const files = readdirSync(dir)
    .filter((f) => /\.(ts|js)$/.test(f) && !f.endsWith('.d.ts') && !/^index\./.test(f))
    .sort();
  for (const file of files) {
    const name = file.replace(/\.(ts|js)$/, '');
    if (!MIGRATION_NAME.test(name)) throw new Error(`src/db/migrations/${file}: a migration is named YYYY_MM_DD_HHMMSS_snake_case_name.`);
    if (migrations[name]) throw new Error(`src/db/migrations: ${name} exists twice (.ts and .js?).`);
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const migration = require(join(dir, file)) as Migration;
    if (typeof migration.up !== 'function' || typeof migration.down !== 'function') {
      throw new Error(`src/db/migrations/${file} must export up() and down().`);
    }
    migrations[name] = migration;
  }
  return migrations;
}
