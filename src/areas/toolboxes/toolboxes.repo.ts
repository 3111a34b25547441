import { sql } from 'kysely';
import { sharedWithQuery } from '../../access/shares';
import type { Executor } from '../../db/database';
import type { Row } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

export type ToolboxRow = Row<'toolboxes'>;

/**
 * One entry of a toolbox, in its position, with what it names read live: the connection's
 * connector, owner and status (null for a synthetic-tool entry), the synthetic tool's name
 * (null for a connection entry). `tools` is 'all' or a list of tool names (connection entries).
 */
export interface ToolboxEntryRow {
  toolbox_id: string;
  position: number;
  type: 'connection' | 'synthetic_tool';
  connection_id: string | null;
  tools: 'all' | string[] | null;
  synthetic_tool_id: string | null;
  connector_slug: string | null;
  connection_owner_user_id: string | null;
  connection_status: Row<'connections'>['status'] | null;
  synthetic_tool_name: string | null;
}

/** An entry as written: positions follow the list's order. */
export type NewToolboxEntry = { type: 'connection'; connection_id: string; tools: 'all' | string[] } | { type: 'synthetic_tool'; synthetic_tool_id: string };

export const NAME_CONSTRAINT = 'toolboxes_org_id_name_key';

/** The toolboxes a member sees: all with `toolbox:manage`, else those they created and those shared with them. */
function visibleQuery(db: Executor, orgId: string, userId: string, canManage: boolean) {
  return db
    .selectFrom('toolboxes')
    .selectAll()
    .where('org_id', '=', orgId)
    .$if(!canManage, (q) => q.where((eb) => eb.or([eb('created_by_user_id', '=', userId), eb('id', 'in', sharedWithQuery(db, orgId, userId, 'toolbox'))])));
}

export function findVisibleToolbox(db: Executor, orgId: string, userId: string, canManage: boolean, id: string): Promise<ToolboxRow | undefined> {
  return visibleQuery(db, orgId, userId, canManage).where('id', '=', id).executeTakeFirst();
}

export function findToolbox(db: Executor, orgId: string, id: string, forUpdate = false): Promise<ToolboxRow | undefined> {
  return db
    .selectFrom('toolboxes')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

/**
 * The toolboxes shared with the user (directly, through one of their teams, or with the
 * whole organization), oldest first: what dynamic user toolboxes are made from. Who created
 * a toolbox does not count; only shares do.
 */
export function toolboxesSharedWith(db: Executor, orgId: string, userId: string): Promise<ToolboxRow[]> {
  return db
    .selectFrom('toolboxes')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('id', 'in', sharedWithQuery(db, orgId, userId, 'toolbox'))
    .orderBy('id')
    .execute();
}

/** The entries of each toolbox, in order, with connection and synthetic-tool details read now; every id asked for has a list. */
export async function toolboxEntries(db: Executor, toolboxIds: string[]): Promise<Map<string, ToolboxEntryRow[]>> {
  const result = new Map<string, ToolboxEntryRow[]>(toolboxIds.map((id) => [id, []]));
  if (toolboxIds.length === 0) return result;
  const rows = await db
    .selectFrom('toolbox_entries as e')
    .leftJoin('connections as c', 'c.id', 'e.connection_id')
    .leftJoin('synthetic_tools as s', 's.id', 'e.synthetic_tool_id')
    .select([
      'e.toolbox_id',
      'e.position',
      'e.type',
      'e.connection_id',
      'e.tools',
      'e.synthetic_tool_id',
      'c.connector_slug',
      'c.owner_user_id as connection_owner_user_id',
      'c.status as connection_status',
      's.name as synthetic_tool_name',
    ])
    .where('e.toolbox_id', 'in', toolboxIds)
    .orderBy('e.toolbox_id')
    .orderBy('e.position')
    .execute();
  for (const row of rows) result.get(row.toolbox_id)?.push({ ...row, tools: row.tools as ToolboxEntryRow['tools'] });
  return result;
}

export function listToolboxes(
  db: Executor,
  orgId: string,
  viewer: { userId: string; canManage: boolean },
  page: PageRequest,
  filter: { connection_id?: string; synthetic_tool_id?: string; created_by_user_id?: string },
): Promise<ToolboxRow[]> {
  return visibleQuery(db, orgId, viewer.userId, viewer.canManage)
    .$if(filter.created_by_user_id !== undefined, (q) => q.where('created_by_user_id', '=', filter.created_by_user_id as string))
    .$if(filter.connection_id !== undefined, (q) =>
      q.where(
        'id',
        'in',
        db
          .selectFrom('toolbox_entries')
          .select('toolbox_id')
          .where('connection_id', '=', filter.connection_id as string),
      ),
    )
    .$if(filter.synthetic_tool_id !== undefined, (q) =>
      q.where(
        'id',
        'in',
        db
          .selectFrom('toolbox_entries')
          .select('toolbox_id')
          .where('synthetic_tool_id', '=', filter.synthetic_tool_id as string),
      ),
    )
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export async function countToolboxes(db: Executor, orgId: string): Promise<number> {
  const row = await db
    .selectFrom('toolboxes')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export function insertToolbox(
  db: Executor,
  values: { id: string; org_id: string; name: string; description: string | null; created_by_user_id: string | null },
): Promise<ToolboxRow> {
  return db.insertInto('toolboxes').values(values).returningAll().executeTakeFirstOrThrow();
}

export function updateToolbox(db: Executor, orgId: string, id: string, changes: { name?: string; description?: string | null }): Promise<ToolboxRow> {
  return (
    db
      .updateTable('toolboxes')
      // Entries alone changed: updated_at still moves (the trigger fires on any update).
      .set(Object.keys(changes).length > 0 ? changes : { updated_at: sql`now()` })
      .where('org_id', '=', orgId)
      .where('id', '=', id)
      .returningAll()
      .executeTakeFirstOrThrow()
  );
}

/** Replaces the toolbox's entries with these, in this order. */
export async function replaceEntries(db: Executor, toolboxId: string, entries: NewToolboxEntry[]): Promise<void> {
  await db.deleteFrom('toolbox_entries').where('toolbox_id', '=', toolboxId).execute();
  if (entries.length === 0) return;
  await db
    .insertInto('toolbox_entries')
    .values(
      entries.map((entry, position) =>
        entry.type === 'connection'
          ? {
              toolbox_id: toolboxId,
              position,
              type: 'connection' as const,
              connection_id: entry.connection_id,
              tools: JSON.stringify(entry.tools),
              synthetic_tool_id: null,
            }
          : { toolbox_id: toolboxId, position, type: 'synthetic_tool' as const, connection_id: null, tools: null, synthetic_tool_id: entry.synthetic_tool_id },
      ),
    )
    .execute();
}

export function deleteToolbox(db: Executor, orgId: string, id: string): Promise<ToolboxRow | undefined> {
  return db.deleteFrom('toolboxes').where('org_id', '=', orgId).where('id', '=', id).returningAll().executeTakeFirst();
}
