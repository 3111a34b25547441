import type { WriteScope } from '../../http/context';

/**
 * Where other areas plug into what happens to toolboxes, inside the toolbox's own
 * transaction. MCP servers register here: a deleted toolbox, or a revoked share
 * that leaves members without it, makes the MCP servers minted for its dynamic user
 * toolboxes `unavailable` (deleteToolbox, revokeToolboxShare say so), and a share that
 * reaches them again makes theirs `active` again: user-toolboxes/mcp-servers.service.ts.
 */

/** The toolbox is being deleted (its row is still there, locked). */
export type ToolboxDeletedHook = (w: WriteScope, orgId: string, toolboxId: string) => Promise<void>;
export const toolboxDeletedHooks: ToolboxDeletedHook[] = [];

/**
 * A share of the toolbox was made or revoked: members who no longer reach it
 * (toolboxesSharedWith tells) lose its dynamic user toolbox; those who reach it again get it back.
 */
export type ToolboxAccessHook = (w: WriteScope, orgId: string, toolboxId: string) => Promise<void>;
export const toolboxAccessHooks: ToolboxAccessHook[] = [];
