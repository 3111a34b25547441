import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { NewRow, Row } from '../../db/schema';

const COLUMNS = ['id', 'org_id', 'owner_user_id', 'template_id', 'name', 'description', 'entries', 'created_at', 'updated_at'] as const;
export type UserToolboxRow = Pick<Row<'user_toolboxes'>, (typeof COLUMNS)[number]>;
export type BindingRow = Row<'user_toolbox_bindings'>;

export const NAME_CONSTRAINT = 'user_toolboxes_owner_name_key';

/** The owner's stored user toolboxes after `after` (an id), oldest first, `limit` of them (plus one to tell whether more follow). */
export function listOwned(db: Executor, orgId: string, ownerUserId: string, filter: { after?: string; limit: number; templateId?: string }) {
  return db
    .selectFrom('user_toolboxes')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .$if(filter.templateId !== undefined, (q) => q.where('template_id', '=', filter.templateId as string))
    .$if(filter.after !== undefined, (q) => q.where('id', '>', filter.after as string))
    .orderBy('id')
    .limit(filter.limit)
    .execute();
}

export function findOwned(db: Executor, orgId: string, ownerUserId: string, id: string, forUpdate = false): Promise<UserToolboxRow | undefined> {
  return db
    .selectFrom('user_toolboxes')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

export async function ownerHasTemplate(db: Executor, orgId: string, ownerUserId: string, templateId: string): Promise<boolean> {
  const row = await db
    .selectFrom('user_toolboxes')
    .select('id')
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .where('template_id', '=', templateId)
    .limit(1)
    .executeTakeFirst();
  return !!row;
}

/** The owner's user toolbox names that start with `prefix` (to pick a free default name). */
export async function namesStartingWith(db: Executor, orgId: string, ownerUserId: string, prefix: string): Promise<Set<string>> {
  const rows = await db
    .selectFrom('user_toolboxes')
    .select('name')
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .where('name', 'like', `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)
    .execute();
  return new Set(rows.map((r) => r.name));
}

export function insert(db: Executor, values: NewRow<'user_toolboxes'>): Promise<UserToolboxRow> {
  return db.insertInto('user_toolboxes').values(values).returning(COLUMNS).executeTakeFirstOrThrow();
}

export function update(db: Executor, orgId: string, id: string, changes: { name?: string; description?: string | null }): Promise<UserToolboxRow | undefined> {
  // `updated_at` moves with every change, bindings included (the trigger sets it on any update).
  return db
    .updateTable('user_toolboxes')
    .set({ ...changes, updated_at: new Date() })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .returning(COLUMNS)
    .executeTakeFirst();
}

export function remove(db: Executor, orgId: string, id: string): Promise<UserToolboxRow | undefined> {
  return db.deleteFrom('user_toolboxes').where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

export async function replaceBindings(db: Executor, id: string, bindings: readonly { connector_slug: string; connection_id: string }[]): Promise<void> {
  await db.deleteFrom('user_toolbox_bindings').where('user_toolbox_id', '=', id).execute();
  if (bindings.length > 0) {
    await db
      .insertInto('user_toolbox_bindings')
      .values(bindings.map((b) => ({ user_toolbox_id: id, connector_slug: b.connector_slug, connection_id: b.connection_id })))
      .execute();
  }
}

export async function bindingsOf(db: Executor, ids: readonly string[]): Promise<Map<string, BindingRow[]>> {
  const byBox = new Map<string, BindingRow[]>(ids.map((id) => [id, []]));
  if (ids.length === 0) return byBox;
  const rows = await db.selectFrom('user_toolbox_bindings').selectAll().where('user_toolbox_id', 'in', ids).execute();
  for (const row of rows) byBox.get(row.user_toolbox_id)?.push(row);
  return byBox;
}

// ---------------------------------------------------------------------------------------
// Connections as user toolboxes see them: whose, of which connector, in which state
// ---------------------------------------------------------------------------------------

const CONNECTION_STATE = [
  'id',
  'org_id',
  'connector_slug',
  'owner_user_id',
  'status',
  'awaiting_acceptance',
  'transferred_at',
  'created_at',
  'updated_at',
] as const;
export type ConnectionStateRow = Pick<Row<'connections'>, (typeof CONNECTION_STATE)[number]>;

/**
 * The owner's connections, those they made first (oldest first), then those they received by
 * transfer (earliest received first): where two offer one tool name the first wins, so a
 * received connection never shadows one the owner made, whatever their ages.
 */
export function connectionsOwnedBy(db: Executor, orgId: string, ownerUserId: string): Promise<ConnectionStateRow[]> {
  return db
    .selectFrom('connections')
    .select(CONNECTION_STATE)
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .orderBy(sql`transferred_at is not null`)
    .orderBy('transferred_at')
    .orderBy('id')
    .execute();
}

export async function connectionStates(db: Executor, orgId: string, ids: readonly string[]): Promise<ConnectionStateRow[]> {
  if (ids.length === 0) return [];
  return db.selectFrom('connections').select(CONNECTION_STATE).where('org_id', '=', orgId).where('id', 'in', ids).execute();
}

export async function joinedAt(db: Executor, orgId: string, userId: string): Promise<Date> {
  const row = await db.selectFrom('memberships').select('created_at').where('org_id', '=', orgId).where('user_id', '=', userId).executeTakeFirst();
  return row?.created_at ?? new Date(0);
}

/**
 * Tool lists already parsed, by connection, with the `fetched_at` they were read at: a list
 * is read and parsed again only when the connection's row says it was fetched since (or was
 * forgotten). Bounded; least recently used lists go first. Every process keeps its own and
 * asks the database which lists changed on every call, so replicas never serve an old list.
 */
const PARSED_MAX = 256;
const parsed = new Map<string, { fetchedAt: number; tools: unknown[] }>();

function remember(connectionId: string, fetchedAt: Date, tools: unknown): unknown[] {
  const list = Array.isArray(tools) ? (tools as unknown[]) : [];
  parsed.delete(connectionId);
  parsed.set(connectionId, { fetchedAt: fetchedAt.getTime(), tools: list });
  while (parsed.size > PARSED_MAX) parsed.delete(parsed.keys().next().value as string);
  return list;
}

/** The cached tool lists of the connections, by connection id (absent: never fetched, or forgotten). Callers must not change them. */
export async function toolCaches(db: Executor, connectionIds: readonly string[]): Promise<Map<string, readonly unknown[]>> {
  const lists = new Map<string, readonly unknown[]>();
  if (connectionIds.length === 0) return lists;
  const stamps = await db.selectFrom('connection_tools').select(['connection_id', 'fetched_at']).where('connection_id', 'in', connectionIds).execute();
  const changed: string[] = [];
  for (const { connection_id: id, fetched_at: fetchedAt } of stamps) {
    const known = parsed.get(id);
    if (known && known.fetchedAt === fetchedAt.getTime()) {
      parsed.delete(id);
      parsed.set(id, known);
      lists.set(id, known.tools);
    } else changed.push(id);
  }
  if (changed.length > 0) {
    const rows = await db.selectFrom('connection_tools').select(['connection_id', 'tools', 'fetched_at']).where('connection_id', 'in', changed).execute();
    for (const row of rows) lists.set(row.connection_id, remember(row.connection_id, row.fetched_at, row.tools));
  }
  return lists;
}

export async function syntheticTools(db: Executor, orgId: string, ids: readonly string[]) {
  if (ids.length === 0) return new Map<string, Row<'synthetic_tools'>>();
  const rows = await db.selectFrom('synthetic_tools').selectAll().where('org_id', '=', orgId).where('id', 'in', ids).execute();
  return new Map(rows.map((r) => [r.id, r]));
}

/** Deletes every stored user toolbox of the owner (their bindings go with them); returns what was deleted. */
export function removeAllOwned(db: Executor, orgId: string, ownerUserId: string): Promise<{ id: string; name: string }[]> {
  return db.deleteFrom('user_toolboxes').where('org_id', '=', orgId).where('owner_user_id', '=', ownerUserId).returning(['id', 'name']).execute();
}
