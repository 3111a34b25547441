import { sql } from 'kysely';
import { sharedWithQuery } from '../../access/shares';
import type { Executor } from '../../db/database';
import type { Row } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

/** One entry as stored in `templates.entries` (TemplateEntry of the spec). */
export interface StoredTemplateEntry {
  connector_slug: string;
  tools: 'all' | string[];
}

export type TemplateRow = Omit<Row<'templates'>, 'entries'> & { entries: StoredTemplateEntry[] };

export const NAME_CONSTRAINT = 'templates_org_id_name_key';

const asRow = (row: Row<'templates'>): TemplateRow => row as unknown as TemplateRow;

/** The templates a member sees: all with `template:manage`, else their own and those shared with them. */
function visibleQuery(db: Executor, orgId: string, userId: string, canManage: boolean) {
  return db
    .selectFrom('templates')
    .selectAll()
    .where('org_id', '=', orgId)
    .$if(!canManage, (q) => q.where((eb) => eb.or([eb('owner_user_id', '=', userId), eb('id', 'in', sharedWithQuery(db, orgId, userId, 'template'))])));
}

/**
 * A template of the organization as `userId` sees it: owned by them, shared with them
 * (directly, through a team, or with the organization), or any with `canManage`
 * (`template:manage`, as the caller's credential holds it); null when not visible.
 */
export async function findVisibleTemplate(db: Executor, orgId: string, userId: string, canManage: boolean, id: string): Promise<TemplateRow | null> {
  const row = await visibleQuery(db, orgId, userId, canManage).where('id', '=', id).executeTakeFirst();
  return row ? asRow(row) : null;
}

export async function findTemplate(db: Executor, orgId: string, id: string, forUpdate = false): Promise<TemplateRow | undefined> {
  const row = await db
    .selectFrom('templates')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
  return row ? asRow(row) : undefined;
}

export async function listTemplates(
  db: Executor,
  orgId: string,
  viewer: { userId: string; canManage: boolean },
  page: PageRequest,
  filter: { owner_user_id?: string; connector_slug?: string },
): Promise<TemplateRow[]> {
  const rows = await visibleQuery(db, orgId, viewer.userId, viewer.canManage)
    .$if(filter.owner_user_id !== undefined, (q) => q.where('owner_user_id', '=', filter.owner_user_id as string))
    .$if(filter.connector_slug !== undefined, (q) => q.where(sql<boolean>`entries @> ${JSON.stringify([{ connector_slug: filter.connector_slug }])}::jsonb`))
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
  return rows.map(asRow);
}

export async function insertTemplate(
  db: Executor,
  values: { id: string; org_id: string; name: string; description: string | null; owner_user_id: string; entries: StoredTemplateEntry[] },
): Promise<TemplateRow> {
  const row = await db
    .insertInto('templates')
    .values({ ...values, entries: JSON.stringify(values.entries) })
    .returningAll()
    .executeTakeFirstOrThrow();
  return asRow(row);
}

export async function updateTemplate(
  db: Executor,
  orgId: string,
  id: string,
  changes: { name?: string; description?: string | null; owner_user_id?: string; entries?: StoredTemplateEntry[] },
): Promise<TemplateRow> {
  const { entries, ...rest } = changes;
  const row = await db
    .updateTable('templates')
    .set({ ...rest, ...(entries !== undefined ? { entries: JSON.stringify(entries) } : {}) })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
  return asRow(row);
}

export async function deleteTemplate(db: Executor, orgId: string, id: string): Promise<TemplateRow | undefined> {
  const row = await db.deleteFrom('templates').where('org_id', '=', orgId).where('id', '=', id).returningAll().executeTakeFirst();
  return row ? asRow(row) : undefined;
}

/** How many templates of the organization have an entry for the connector. */
export async function countTemplatesUsing(db: Executor, orgId: string, slug: string): Promise<number> {
  const row = await db
    .selectFrom('templates')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .where(sql<boolean>`entries @> ${JSON.stringify([{ connector_slug: slug }])}::jsonb`)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
