// Lists page through an organization's rows by id (`where org_id = $1 and id > $2 order by id
// limit n`). Without an index led by (org_id, id), PostgreSQL either reads all of the
// organization's rows and sorts them on every page, or walks the primary key through every
// organization's rows, skipping those of others: for an organization of 20,000 notification
// destinations created after another's 100,000, page 1 read 100,060 rows (34 ms) instead of 51
// (0.24 ms). These tables had only their name keys; the other listed tables have this index
// since they were made. They hold settings (a few rows per organization), so a plain CREATE
// INDEX, inside the migration's transaction, holds their writes only briefly.
import type { Kysely } from 'kysely';

const TABLES = [
  'notification_destinations',
  'logging_destinations',
  'roles',
  'teams',
  'scim_tokens',
  'scim_groups',
  'group_mappings',
  'sso_connections',
] as const;

export async function up(db: Kysely<any>): Promise<void> {
  for (const table of TABLES) await db.schema.createIndex(`${table}_org_id_idx`).on(table).columns(['org_id', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of TABLES) await db.schema.dropIndex(`${table}_org_id_idx`).execute();
}
