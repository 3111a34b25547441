import { sql } from 'kysely';
import { sharedWithQuery } from '../../access/shares';
import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';
import type { SyntheticToolStep } from './synthetic-tools.types';

const COLUMNS = [
  'id',
  'org_id',
  'name',
  'description',
  'input_schema',
  'output_schema',
  'steps',
  'output',
  'created_by_user_id',
  'created_at',
  'updated_at',
] as const;

/** A synthetic tool as stored, its JSON columns read as the shapes they are written in. */
export type SyntheticToolRow = Omit<Pick<Row<'synthetic_tools'>, (typeof COLUMNS)[number]>, 'input_schema' | 'output_schema' | 'steps' | 'output'> & {
  input_schema: Record<string, unknown>;
  output_schema: Record<string, unknown> | null;
  steps: SyntheticToolStep[];
  output: unknown;
};

export function listSyntheticTools(db: Executor, orgId: string, page: PageRequest, filter: { connector_slug?: string; created_by_user_id?: string }) {
  return db
    .selectFrom('synthetic_tools')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(filter.created_by_user_id !== undefined, (q) => q.where('created_by_user_id', '=', filter.created_by_user_id as string))
    .$if(filter.connector_slug !== undefined, (q) =>
      q.where(sql<boolean>`steps @> ${JSON.stringify([{ tool: { connector_slug: filter.connector_slug } }])}::jsonb`),
    )
    .orderBy('id')
    .limit(page.limit + 1)
    .$castTo<SyntheticToolRow>()
    .execute();
}

export function findSyntheticTool(db: Executor, orgId: string, id: string, forUpdate = false) {
  return db
    .selectFrom('synthetic_tools')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .$castTo<SyntheticToolRow>()
    .executeTakeFirst();
}

export async function countSyntheticTools(db: Executor, orgId: string): Promise<number> {
  const row = await db
    .selectFrom('synthetic_tools')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export function insertSyntheticTool(db: Executor, values: NewRow<'synthetic_tools'>) {
  return db.insertInto('synthetic_tools').values(values).returning(COLUMNS).$castTo<SyntheticToolRow>().executeTakeFirstOrThrow();
}

export function updateSyntheticTool(db: Executor, orgId: string, id: string, changes: RowChanges<'synthetic_tools'>) {
  return db
    .updateTable('synthetic_tools')
    .set(changes)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .returning(COLUMNS)
    .$castTo<SyntheticToolRow>()
    .executeTakeFirst();
}

export function deleteSyntheticTool(db: Executor, orgId: string, id: string) {
  return db.deleteFrom('synthetic_tools').where('org_id', '=', orgId).where('id', '=', id).returning(['id', 'name']).executeTakeFirst();
}

/** The toolboxes that list the synthetic tool, and the restrictions that name it: what keeps it from being deleted. */
export async function usesOf(db: Executor, orgId: string, id: string) {
  const toolboxes = await db
    .selectFrom('toolbox_entries as e')
    .innerJoin('toolboxes as t', 't.id', 'e.toolbox_id')
    .select(['t.id', 't.name'])
    .distinct()
    .where('t.org_id', '=', orgId)
    .where('e.synthetic_tool_id', '=', id)
    .orderBy('t.id')
    .execute();
  const restrictions = await db
    .selectFrom('restrictions')
    .select(['id', 'name'])
    .where('org_id', '=', orgId)
    .where('match_synthetic_tool_id', '=', id)
    .orderBy('id')
    .execute();
  return { toolboxes, restrictions };
}

/** Connections of the organization, by id (pinned connections, bindings). */
export function connectionsByIds(db: Executor, orgId: string, ids: string[]) {
  if (ids.length === 0) return Promise.resolve([]);
  return db.selectFrom('connections').select(['id', 'connector_slug', 'owner_user_id', 'status']).where('org_id', '=', orgId).where('id', 'in', ids).execute();
}

/** The tool names the organization's connections of a connector last listed (their caches), or of one connection. */
export async function cachedToolNames(db: Executor, orgId: string, slug: string, connectionId: string | null): Promise<Set<string>> {
  const rows = await db
    .selectFrom('connection_tools as ct')
    .innerJoin('connections as c', 'c.id', 'ct.connection_id')
    .select(['ct.tools'])
    .where('c.org_id', '=', orgId)
    .where('c.connector_slug', '=', slug)
    .$if(connectionId !== null, (q) => q.where('c.id', '=', connectionId as string))
    .execute();
  const names = new Set<string>();
  for (const row of rows) for (const tool of (row.tools as { name: string }[] | null) ?? []) names.add(tool.name);
  return names;
}

/**
 * The caller's connection of a connector (any state: the runner says why it cannot be used):
 * one that serves first, then one they made before one they received by transfer (which never
 * shadows theirs), oldest first.
 */
export function ownConnectionOf(db: Executor, orgId: string, userId: string, slug: string) {
  return db
    .selectFrom('connections')
    .select(['id'])
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', userId)
    .where('connector_slug', '=', slug)
    .orderBy(sql`case when status = 'active' and not awaiting_acceptance then 0 else 1 end`)
    .orderBy(sql`transferred_at is not null`)
    .orderBy('transferred_at')
    .orderBy('created_at')
    .orderBy('id')
    .executeTakeFirst();
}

/**
 * The tools of a connection the user reaches through the toolboxes shared with them (directly,
 * through a team, or the organization): 'all' when an entry selecting the connection offers
 * all its tools, else the names the entries select (empty: no such entry). Someone else's
 * connection acts only as far as its entries say, so a step through it may call nothing more.
 */
export async function toolsReachedThroughToolboxes(db: Executor, orgId: string, userId: string, connectionId: string): Promise<'all' | Set<string>> {
  const rows = await db
    .selectFrom('toolbox_entries as e')
    .innerJoin('toolboxes as t', 't.id', 'e.toolbox_id')
    .select(['e.tools'])
    .where('t.org_id', '=', orgId)
    .where('e.type', '=', 'connection')
    .where('e.connection_id', '=', connectionId)
    .where('e.toolbox_id', 'in', sharedWithQuery(db, orgId, userId, 'toolbox'))
    .execute();
  const names = new Set<string>();
  for (const row of rows) {
    const tools = row.tools as 'all' | string[] | null;
    if (tools === 'all') return 'all';
    for (const name of tools ?? []) names.add(name);
  }
  return names;
}
