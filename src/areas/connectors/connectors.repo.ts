import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { Row, RowChanges } from '../../db/schema';
import { sharedWithQuery } from '../../access/shares';
import type { ConnectorContent } from './content';

/** A custom connector as stored, its JSON `content` read as the shape it is written in. */
export type ConnectorRow = Omit<Row<'connectors'>, 'content'> & { content: ConnectorContent };

/** Who is asking: holders of `connector:manage` see every custom connector, others those shared with them. */
export interface Viewer {
  userId: string;
  canManage: boolean;
}

export function findConnector(db: Executor, orgId: string, slug: string, forUpdate = false) {
  return db
    .selectFrom('connectors')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('slug', '=', slug)
    .$if(forUpdate, (q) => q.forUpdate())
    .$castTo<ConnectorRow>()
    .executeTakeFirst();
}

/** Custom connectors the viewer sees, by slug, after `after`, at most `limit`. */
export function listConnectors(
  db: Executor,
  orgId: string,
  viewer: Viewer,
  page: { after: string | undefined; limit: number },
  filter: { q?: string; authType?: string },
) {
  return db
    .selectFrom('connectors')
    .selectAll()
    .where('org_id', '=', orgId)
    .$if(!viewer.canManage, (q) => q.where('slug', 'in', sharedWithQuery(db, orgId, viewer.userId, 'connector')))
    .$if(page.after !== undefined, (q) => q.where('slug', '>', page.after as string))
    .$if(filter.authType !== undefined, (q) => q.where(sql`content->'auth'->>'type'`, '=', filter.authType as string))
    .$if(filter.q !== undefined, (q) => {
      const text = (filter.q as string).toLowerCase();
      return q.where((eb) =>
        eb.or([
          eb(sql`strpos(lower(slug), ${text})`, '>', 0),
          eb(sql`strpos(lower(content->>'name'), ${text})`, '>', 0),
          eb(sql`strpos(lower(coalesce(content->>'description', '')), ${text})`, '>', 0),
        ]),
      );
    })
    .orderBy('slug')
    .limit(page.limit)
    .$castTo<ConnectorRow>()
    .execute();
}

/** The custom connectors' slugs among `slugs` (they hide built-ins of the same slug in this organization). */
export async function customSlugsAmong(db: Executor, orgId: string, slugs: string[]): Promise<Set<string>> {
  if (slugs.length === 0) return new Set();
  const rows = await db.selectFrom('connectors').select('slug').where('org_id', '=', orgId).where('slug', 'in', slugs).execute();
  return new Set(rows.map((r) => r.slug));
}

/** The current versions of custom connectors, by slug. */
export async function currentVersions(db: Executor, orgId: string, slugs: string[]): Promise<Map<string, number>> {
  if (slugs.length === 0) return new Map();
  const rows = await db.selectFrom('connectors').select(['slug', 'version']).where('org_id', '=', orgId).where('slug', 'in', slugs).execute();
  return new Map(rows.map((r) => [r.slug, r.version]));
}

export async function countConnectors(db: Executor, orgId: string): Promise<number> {
  const row = await db
    .selectFrom('connectors')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export function insertConnector(
  db: Executor,
  values: {
    org_id: string;
    slug: string;
    content: ConnectorContent;
    client_secret_enc: string | null;
    upstream_slug: string | null;
    upstream_version: number | null;
    linked_at: Date | null;
    created_by_user_id: string | null;
  },
) {
  return db
    .insertInto('connectors')
    .values({ ...values, version: 1, content: JSON.stringify(values.content) })
    .returningAll()
    .$castTo<ConnectorRow>()
    .executeTakeFirstOrThrow();
}

export function updateConnector(
  db: Executor,
  orgId: string,
  slug: string,
  changes: Omit<RowChanges<'connectors'>, 'content'> & { content?: ConnectorContent },
) {
  const { content, ...rest } = changes;
  return db
    .updateTable('connectors')
    .set({ ...rest, ...(content !== undefined ? { content: JSON.stringify(content) } : {}) })
    .where('org_id', '=', orgId)
    .where('slug', '=', slug)
    .returningAll()
    .$castTo<ConnectorRow>()
    .executeTakeFirstOrThrow();
}

export function deleteConnector(db: Executor, orgId: string, slug: string) {
  return db
    .deleteFrom('connectors')
    .where('org_id', '=', orgId)
    .where('slug', '=', slug)
    .returning(['slug', 'version', 'content'])
    .$castTo<Pick<ConnectorRow, 'slug' | 'version' | 'content'>>()
    .executeTakeFirst();
}

export async function insertVersion(db: Executor, orgId: string, slug: string, version: number, content: ConnectorContent): Promise<void> {
  await db
    .insertInto('connector_versions')
    .values({ org_id: orgId, slug, version, content: JSON.stringify(content) })
    .execute();
}

export async function versionContent(db: Executor, orgId: string, slug: string, version: number): Promise<ConnectorContent | null> {
  const row = await db
    .selectFrom('connector_versions')
    .select('content')
    .where('org_id', '=', orgId)
    .where('slug', '=', slug)
    .where('version', '=', version)
    .executeTakeFirst();
  return row ? (row.content as unknown as ConnectorContent) : null;
}

/** The upstream of each custom connector of the organization, for walking lineage (cycles). */
export async function lineage(db: Executor, orgId: string): Promise<Map<string, string | null>> {
  const rows = await db.selectFrom('connectors').select(['slug', 'upstream_slug']).where('org_id', '=', orgId).execute();
  return new Map(rows.map((r) => [r.slug, r.upstream_slug]));
}
