import type { Executor } from '../../db/database';
import type { NewRow, Row } from '../../db/schema';

const COLUMNS = [
  'id',
  'org_id',
  'user_toolbox_id',
  'owner_user_id',
  'name',
  'token_hint',
  'status',
  'expires_at',
  'last_used_at',
  'token_rotated_at',
  'created_at',
  'updated_at',
] as const;
export type McpServerRow = Pick<Row<'mcp_servers'>, (typeof COLUMNS)[number]>;
export type ListedStatus = 'active' | 'expired' | 'unavailable';

export const NAME_CONSTRAINT = 'mcp_servers_owner_toolbox_name_key';

/** The owner's servers (of one user toolbox, or all), oldest first, after `after`, `limit` of them. */
export function listOwned(
  db: Executor,
  orgId: string,
  ownerUserId: string,
  filter: { after?: string; limit: number; userToolboxId?: string; status?: ListedStatus },
  now = new Date(),
): Promise<McpServerRow[]> {
  const { status } = filter;
  return db
    .selectFrom('mcp_servers')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .$if(filter.userToolboxId !== undefined, (q) => q.where('user_toolbox_id', '=', filter.userToolboxId as string))
    .$if(status === 'expired', (q) => q.where('expires_at', '<=', now))
    .$if(status === 'active' || status === 'unavailable', (q) =>
      q.where('status', '=', status as 'active' | 'unavailable').where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', now)])),
    )
    .$if(filter.after !== undefined, (q) => q.where('id', '>', filter.after as string))
    .orderBy('id')
    .limit(filter.limit)
    .execute();
}

export function findOwned(
  db: Executor,
  orgId: string,
  ownerUserId: string,
  userToolboxId: string,
  id: string,
  forUpdate = false,
): Promise<McpServerRow | undefined> {
  return db
    .selectFrom('mcp_servers')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .where('user_toolbox_id', '=', userToolboxId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

export async function ownerHasAny(db: Executor, orgId: string, ownerUserId: string, userToolboxId: string): Promise<boolean> {
  const row = await db
    .selectFrom('mcp_servers')
    .select('id')
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .where('user_toolbox_id', '=', userToolboxId)
    .limit(1)
    .executeTakeFirst();
  return !!row;
}

export async function countInOrg(db: Executor, orgId: string): Promise<number> {
  const row = await db
    .selectFrom('mcp_servers')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function countsByUserToolbox(db: Executor, orgId: string, ownerUserId: string, ids: readonly string[]): Promise<Map<string, number>> {
  const rows = await db
    .selectFrom('mcp_servers')
    .select(['user_toolbox_id', (eb) => eb.fn.countAll<string>().as('n')])
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .where('user_toolbox_id', 'in', ids)
    .groupBy('user_toolbox_id')
    .execute();
  return new Map(rows.map((r) => [r.user_toolbox_id, Number(r.n)]));
}

export function insert(db: Executor, values: NewRow<'mcp_servers'>): Promise<McpServerRow> {
  return db.insertInto('mcp_servers').values(values).returning(COLUMNS).executeTakeFirstOrThrow();
}

export function update(
  db: Executor,
  orgId: string,
  id: string,
  changes: { name?: string; expires_at?: Date | null; token_hash?: string; token_hint?: string; token_rotated_at?: Date; minted_by_token_id?: string | null },
): Promise<McpServerRow | undefined> {
  return db
    .updateTable('mcp_servers')
    .set({ ...changes, updated_at: new Date() })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .returning(COLUMNS)
    .executeTakeFirst();
}

export function remove(db: Executor, orgId: string, id: string): Promise<McpServerRow | undefined> {
  return db.deleteFrom('mcp_servers').where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

/** Deletes every server of a user toolbox; returns what went, for the audit entry. */
export function removeOfUserToolbox(db: Executor, orgId: string, userToolboxId: string): Promise<{ id: string; name: string }[]> {
  return db.deleteFrom('mcp_servers').where('org_id', '=', orgId).where('user_toolbox_id', '=', userToolboxId).returning(['id', 'name']).execute();
}

/**
 * Sets the servers of a dynamic user toolbox `unavailable` (its toolbox gone, or out of its
 * owner's reach) or `active` again (back in reach), of the named owners only when given.
 */
export async function setAvailability(
  db: Executor,
  orgId: string,
  userToolboxId: string,
  status: 'active' | 'unavailable',
  ownerUserIds?: readonly string[],
): Promise<void> {
  if (ownerUserIds && ownerUserIds.length === 0) return;
  await db
    .updateTable('mcp_servers')
    .set({ status })
    .where('org_id', '=', orgId)
    .where('user_toolbox_id', '=', userToolboxId)
    .where('status', '=', status === 'active' ? 'unavailable' : 'active')
    .$if(ownerUserIds !== undefined, (q) => q.where('owner_user_id', 'in', ownerUserIds as string[]))
    .execute();
}

/** The dynamic user toolboxes of shared toolboxes (`utbx_dyn_tbx_…`) a person has MCP servers for. */
export async function sharedToolboxBoxesOf(db: Executor, orgId: string, ownerUserId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('mcp_servers')
    .select('user_toolbox_id')
    .distinct()
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .where('user_toolbox_id', 'like', 'utbx\\_dyn\\_tbx\\_%')
    .execute();
  return rows.map((r) => r.user_toolbox_id);
}

/** The distinct owners of a user toolbox's servers. */
export async function ownersOf(db: Executor, orgId: string, userToolboxId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('mcp_servers')
    .select('owner_user_id')
    .distinct()
    .where('org_id', '=', orgId)
    .where('user_toolbox_id', '=', userToolboxId)
    .execute();
  return rows.map((r) => r.owner_user_id);
}

/** Deletes every MCP server the owner has in the organization (stored or dynamic user toolboxes alike). */
export function removeOfOwner(db: Executor, orgId: string, ownerUserId: string): Promise<{ id: string; name: string }[]> {
  return db.deleteFrom('mcp_servers').where('org_id', '=', orgId).where('owner_user_id', '=', ownerUserId).returning(['id', 'name']).execute();
}
