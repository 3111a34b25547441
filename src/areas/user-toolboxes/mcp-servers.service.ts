import type { components } from '../../../generated/openapi';
import { requireWithinLimit } from '../../access/entitlements';
import { newMcpToken } from '../../identity/mcp-tokens';
import { changedMembers, type RequestContext, type WriteScope } from '../../http/context';
import { ApiError, isUniqueViolation, validationError } from '../../http/errors';
import type { Page, PageRequest } from '../../http/pagination';
import { toPage } from '../../http/pagination';
import { newId } from '../../lib/ids';
import type { HookListeners } from '../../http/hooks';
import * as repo from './mcp-servers.repo';
import { dynamicIdOf, resolveUserToolbox } from './resolve';
import { toolboxesSharedWith } from './sources';

type McpServer = components['schemas']['McpServer'];
type Minted = components['schemas']['McpServerMinted'];
type Create = components['schemas']['McpServerCreate'];
type Update = components['schemas']['McpServerUpdate'];
type Status = components['schemas']['McpServerStatus'];

const iso = (d: Date | null): string | null => (d ? d.toISOString() : null);

/** `expired` once `expires_at` has passed, whatever else is stored; otherwise the stored status. */
export function statusOf(row: Pick<repo.McpServerRow, 'status' | 'expires_at'>, now = new Date()): Status {
  if (row.expires_at && row.expires_at <= now) return 'expired';
  return row.status;
}

function toMcpServer(ctx: RequestContext, row: repo.McpServerRow): McpServer {
  return {
    id: row.id,
    user_toolbox_id: row.user_toolbox_id,
    owner_user_id: row.owner_user_id,
    name: row.name,
    url: `${ctx.deps.config.baseUrl}/mcp/${row.id}`,
    token_hint: row.token_hint,
    status: statusOf(row),
    expires_at: iso(row.expires_at),
    last_used_at: iso(row.last_used_at),
    token_rotated_at: iso(row.token_rotated_at),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

const serverNotFound = (userToolboxId: string, id: string) =>
  new ApiError('not_found', `No MCP server ${id} of your user toolbox ${userToolboxId} in this organization.`);
const toolboxNotFound = (id: string) => new ApiError('not_found', `No user toolbox ${id} of yours in this organization.`);
const nameTaken = (name: string) => new ApiError('name_taken', `This user toolbox already has an MCP server named "${name}".`);

async function guardName<T>(name: string | undefined, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (name !== undefined && isUniqueViolation(err, repo.NAME_CONSTRAINT)) throw nameTaken(name);
    throw err;
  }
}

/**
 * The API token minting (or rotating) an MCP server's token, which then bounds it (its
 * permissions, its validity: mcp-tokens.ts); null when a session does, and the owner's own
 * permissions apply.
 */
const mintingToken = (ctx: RequestContext): string | null => (ctx.caller?.kind === 'api_token' ? ctx.caller.tokenId : null);

/** 400 unless an expiry given is in the future; the Date to store (null: never). */
function expiryOf(value: string | null | undefined): Date | null | undefined {
  if (value === undefined || value === null) return value;
  const at = new Date(value);
  if (at.getTime() <= Date.now()) throw validationError([{ in: 'body', pointer: '/expires_at', message: 'must be in the future (or null for never)' }]);
  return at;
}

// ---------------------------------------------------------------------------------------
// Reads: the caller's own servers only, whatever their permissions
// ---------------------------------------------------------------------------------------

export async function listAll(ctx: RequestContext, page: PageRequest, status: Status | undefined): Promise<Page<McpServer>> {
  const rows = await repo.listOwned(ctx.db, ctx.orgId, ctx.user, { after: page.after, limit: page.limit + 1, status });
  return toPage(rows, page, (row) => toMcpServer(ctx, row));
}

/**
 * The servers of one user toolbox: 404 when it is not one of the caller's, unless servers
 * of it remain (a dynamic one whose toolbox went: they are `unavailable` and can still be
 * read and deleted).
 */
export async function listOf(ctx: RequestContext, userToolboxId: string, page: PageRequest): Promise<Page<McpServer>> {
  const box = await resolveUserToolbox(ctx.db, ctx.orgId, ctx.user, userToolboxId);
  if (!box && !(await repo.ownerHasAny(ctx.db, ctx.orgId, ctx.user, userToolboxId))) throw toolboxNotFound(userToolboxId);
  const rows = await repo.listOwned(ctx.db, ctx.orgId, ctx.user, { after: page.after, limit: page.limit + 1, userToolboxId });
  return toPage(rows, page, (row) => toMcpServer(ctx, row));
}

export async function get(ctx: RequestContext, userToolboxId: string, id: string): Promise<McpServer> {
  const row = await repo.findOwned(ctx.db, ctx.orgId, ctx.user, userToolboxId, id);
  if (!row) throw serverNotFound(userToolboxId, id);
  return toMcpServer(ctx, row);
}

// ---------------------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------------------

export async function create(ctx: RequestContext, userToolboxId: string, body: Create): Promise<Minted> {
  const expiresAt = expiryOf(body.expires_at) ?? null;
  const box = await resolveUserToolbox(ctx.db, ctx.orgId, ctx.user, userToolboxId);
  if (!box) throw toolboxNotFound(userToolboxId);
  await requireWithinLimit(ctx.db, ctx.orgId, 'mcp_servers', () => repo.countInOrg(ctx.db, ctx.orgId));
  const minted = newMcpToken();
  const row = await guardName(body.name, () =>
    ctx.write(async (w) => {
      await requireWithinLimit(w.db, ctx.orgId, 'mcp_servers', () => repo.countInOrg(w.db, ctx.orgId));
      const id = newId('mcpServer');
      const inserted = await repo.insert(w.db, {
        id,
        org_id: ctx.orgId,
        user_toolbox_id: userToolboxId,
        owner_user_id: ctx.user,
        name: body.name,
        token_hash: minted.hash,
        token_hint: minted.hint,
        expires_at: expiresAt,
        minted_by_token_id: mintingToken(ctx),
      });
      // Never the token, nor its hash.
      w.audit({ targetId: id, changes: { name: body.name, user_toolbox_id: userToolboxId, expires_at: iso(expiresAt) } });
      return inserted;
    }),
  );
  return { mcp_server: toMcpServer(ctx, row), token: minted.token };
}

export async function update(ctx: RequestContext, userToolboxId: string, id: string, body: Update): Promise<McpServer> {
  const expiresAt = expiryOf(body.expires_at);
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const row = await repo.findOwned(w.db, ctx.orgId, ctx.user, userToolboxId, id, true);
      if (!row) throw serverNotFound(userToolboxId, id);
      const changes: { name?: string; expires_at?: Date | null } = {};
      if (body.name !== undefined) changes.name = body.name;
      if (expiresAt !== undefined) changes.expires_at = expiresAt;
      const updated = await repo.update(w.db, ctx.orgId, id, changes);
      w.audit({
        targetId: id,
        changes: changedMembers(
          { name: row.name, expires_at: iso(row.expires_at) },
          { name: changes.name, expires_at: changes.expires_at === undefined ? undefined : iso(changes.expires_at) },
        ),
      });
      return toMcpServer(ctx, updated!);
    }),
  );
}

export async function remove(ctx: RequestContext, userToolboxId: string, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await repo.findOwned(w.db, ctx.orgId, ctx.user, userToolboxId, id, true);
    if (!row) throw serverNotFound(userToolboxId, id);
    await repo.remove(w.db, ctx.orgId, id);
    w.audit({ targetId: id, changes: { name: row.name, user_toolbox_id: row.user_toolbox_id } });
  });
}

/** A new token; the old one is refused from the commit on (the notify trigger clears every server's credential cache). */
export async function rotate(ctx: RequestContext, userToolboxId: string, id: string): Promise<Minted> {
  const minted = newMcpToken();
  const row = await ctx.write(async (w) => {
    const row = await repo.findOwned(w.db, ctx.orgId, ctx.user, userToolboxId, id, true);
    if (!row) throw serverNotFound(userToolboxId, id);
    const rotatedAt = new Date();
    const updated = await repo.update(w.db, ctx.orgId, id, {
      token_hash: minted.hash,
      token_hint: minted.hint,
      token_rotated_at: rotatedAt,
      minted_by_token_id: mintingToken(ctx),
    });
    w.audit({ targetId: id, changes: { name: row.name, user_toolbox_id: row.user_toolbox_id, token_rotated_at: rotatedAt.toISOString() } });
    w.emit('mcp_server.token_rotated', { mcp_server: { id: row.id, name: row.name, user_toolbox_id: row.user_toolbox_id, owner_user_id: row.owner_user_id } });
    return updated!;
  });
  return { mcp_server: toMcpServer(ctx, row), token: minted.token };
}

// ---------------------------------------------------------------------------------------
// What goes with user toolboxes and toolboxes
// ---------------------------------------------------------------------------------------

/** An owner's servers for these dynamic user toolboxes of shared toolboxes: `active` where they reach the toolbox, `unavailable` where not. */
async function followAccess(w: WriteScope, orgId: string, owner: string, boxes: readonly string[]): Promise<void> {
  if (boxes.length === 0) return;
  const reached = new Set((await toolboxesSharedWith(w.db, orgId, owner)).map((t) => dynamicIdOf(t.id)));
  for (const box of boxes) await repo.setAvailability(w.db, orgId, box, reached.has(box) ? 'active' : 'unavailable', [owner]);
}

/** MCP servers follow their toolboxes: deleted, shared or unshared, reached through teams or not. */
export const mcpServerHooks: HookListeners = {
  async toolboxDeleted(w, orgId, toolboxId) {
    await repo.setAvailability(w.db, orgId, dynamicIdOf(toolboxId), 'unavailable');
  },
  // A share made or revoked: the servers of everyone who has some for its toolbox follow.
  async toolboxAccessChanged(w, orgId, toolboxId) {
    const dynamicId = dynamicIdOf(toolboxId);
    for (const owner of await repo.ownersOf(w.db, orgId, dynamicId)) await followAccess(w, orgId, owner, [dynamicId]);
  },
  // Joining or leaving a team changes which toolboxes its shares reach: each person's servers for shared toolboxes follow.
  async teamMembershipChanged(w, orgId, userIds) {
    for (const owner of userIds) await followAccess(w, orgId, owner, await repo.sharedToolboxBoxesOf(w.db, orgId, owner));
  },
};
