import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

export const ORGANIZATION_COLUMNS = [
  'id',
  'name',
  'slug',
  'logo_url',
  'require_mfa',
  'plan',
  'created_at',
  'updated_at',
  'logo_key',
  'logo_content_type',
  'logo_sha256',
  'logo_bytes',
] as const;

export const SLUG_CONSTRAINT = 'organizations_slug_key';

export function findOrganization(db: Executor, orgId: string, forUpdate = false) {
  return db
    .selectFrom('organizations')
    .select(ORGANIZATION_COLUMNS)
    .where('id', '=', orgId)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** The organizations a person is an active member of, oldest first (ids sort by creation). */
export function listMemberOrganizations(db: Executor, userId: string, page: PageRequest) {
  return db
    .selectFrom('memberships as m')
    .innerJoin('organizations as o', 'o.id', 'm.org_id')
    .select(ORGANIZATION_COLUMNS.map((c) => `o.${c}` as const))
    .where('m.user_id', '=', userId)
    .where('m.status', '=', 'active')
    .$if(page.after !== undefined, (q) => q.where('o.id', '>', page.after as string))
    .orderBy('o.id')
    .limit(page.limit + 1)
    .execute();
}

export function updateOrganization(db: Executor, orgId: string, changes: RowChanges<'organizations'>) {
  return db.updateTable('organizations').set(changes).where('id', '=', orgId).returning(ORGANIZATION_COLUMNS).executeTakeFirst();
}

/**
 * Deletes the organization and everything it owns, in the caller's transaction: the row
 * (its foreign keys cascade to what references it), then every other table that keeps an
 * `org_id` without a foreign key (the audit log, the outbox, delivery and tool-call
 * records, whatever a later area adds): found in the catalog, so a new table cannot be
 * forgotten here.
 */
export async function deleteOrganizationEverywhere(db: Executor, orgId: string): Promise<boolean> {
  const deleted = await db.deleteFrom('organizations').where('id', '=', orgId).returning('id').executeTakeFirst();
  if (!deleted) return false;
  const tables = await sql<{ table_name: string }>`
    select c.table_name from information_schema.columns c
    join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name and t.table_type = 'BASE TABLE'
    where c.table_schema = current_schema() and c.column_name = 'org_id'
    order by c.table_name`.execute(db);
  for (const { table_name: table } of tables.rows) {
    await sql`delete from ${sql.table(table)} where org_id = ${orgId}`.execute(db);
  }
  return true;
}
