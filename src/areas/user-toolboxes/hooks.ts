import type { Executor } from '../../db/database';
import type { WriteScope } from '../../http/context';

/**
 * Where the MCP servers plug into user toolboxes, registered when their area
 * loads: how many servers each user toolbox has (`mcp_server_count`), and what goes with a
 * stored user toolbox when it is deleted. With nothing registered, every count is 0.
 */

/** How many MCP servers each of the owner's user toolboxes (stored or dynamic ids) has; missing ids count 0. */
export type McpServerCountHook = (db: Executor, orgId: string, ownerUserId: string, userToolboxIds: readonly string[]) => Promise<ReadonlyMap<string, number>>;
export const mcpServerCountHooks: McpServerCountHook[] = [];

/**
 * A stored user toolbox is being deleted, inside the delete's transaction: delete what
 * belongs to it (its MCP servers, their tokens) and return what was deleted, for the audit
 * entry (`mcp_servers`).
 */
export type UserToolboxDeleteHook = (w: WriteScope, orgId: string, userToolboxId: string) => Promise<{ id: string; name: string }[]>;
export const userToolboxDeleteHooks: UserToolboxDeleteHook[] = [];

export async function mcpServerCounts(db: Executor, orgId: string, ownerUserId: string, ids: readonly string[]): Promise<Map<string, number>> {
  const counts = new Map<string, number>(ids.map((id) => [id, 0]));
  if (ids.length === 0) return counts;
  for (const hook of mcpServerCountHooks) {
    for (const [id, n] of await hook(db, orgId, ownerUserId, ids)) counts.set(id, (counts.get(id) ?? 0) + n);
  }
  return counts;
}

export async function runDeleteHooks(w: WriteScope, orgId: string, userToolboxId: string): Promise<{ id: string; name: string }[]> {
  const deleted: { id: string; name: string }[] = [];
  for (const hook of userToolboxDeleteHooks) deleted.push(...(await hook(w, orgId, userToolboxId)));
  return deleted;
}
