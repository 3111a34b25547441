import type { components } from '../../../generated/openapi';
import { requireWithinLimit } from '../../access/entitlements';
import { deleteSharesOf, listShares, revokeShare, shareResource, shareAuditChanges, type Share } from '../../access/shares';
import type { Executor } from '../../db/database';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError, type ValidationProblem } from '../../http/errors';
import type { Page, PageRequest } from '../../http/pagination';
import { cursorAfter } from '../../http/pagination';
import { newId } from '../../lib/ids';
import * as repo from './toolboxes.repo';

type Toolbox = components['schemas']['Toolbox'];
type ToolboxEntry = components['schemas']['ToolboxEntry'];
type Create = components['schemas']['ToolboxCreate'];
type Update = components['schemas']['ToolboxUpdate'];
type EntryInput = components['schemas']['ToolboxEntryInput'];
type ShareCreate = components['schemas']['ShareCreate'];

const WHAT = 'toolbox';

const canManage = (ctx: RequestContext) => ctx.org?.permissions.has('toolbox:manage') ?? false;
const managesConnections = (ctx: RequestContext) => ctx.org?.permissions.has('connection:manage') ?? false;

function toEntry(row: repo.ToolboxEntryRow): ToolboxEntry {
  if (row.type === 'synthetic_tool') {
    return { type: 'synthetic_tool', synthetic_tool_id: row.synthetic_tool_id as string, name: row.synthetic_tool_name as string };
  }
  return {
    type: 'connection',
    connection_id: row.connection_id as string,
    connector_slug: row.connector_slug as string,
    connection_owner_user_id: row.connection_owner_user_id as string,
    connection_status: row.connection_status as NonNullable<repo.ToolboxEntryRow['connection_status']>,
    tools: row.tools === 'all' || row.tools === null ? 'all' : [...row.tools],
  };
}

function toToolbox(row: repo.ToolboxRow, entries: repo.ToolboxEntryRow[]): Toolbox {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    entries: entries.map(toEntry),
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Toolboxes as answered, their entries read in one query. */
async function present(db: Executor, rows: repo.ToolboxRow[]): Promise<Toolbox[]> {
  const entries = await repo.toolboxEntries(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((row) => toToolbox(row, entries.get(row.id) ?? []));
}

async function presentOne(db: Executor, row: repo.ToolboxRow): Promise<Toolbox> {
  return (await present(db, [row]))[0] as Toolbox;
}

const nameTaken = (name: string) => new ApiError('name_taken', `Another toolbox of this organization is named "${name}".`);

const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined ? run() : conflictOnUnique(repo.NAME_CONSTRAINT, () => nameTaken(name), run);

async function visible(ctx: RequestContext, id: string): Promise<repo.ToolboxRow> {
  const row = await repo.findVisibleToolbox(ctx.db, ctx.orgId, ctx.user, canManage(ctx), id);
  if (!row) throw notFound(WHAT, id);
  return row;
}

const entryKey = (entry: EntryInput | repo.NewToolboxEntry): string =>
  entry.type === 'connection' ? `connection:${entry.connection_id}` : `synthetic_tool:${entry.synthetic_tool_id}`;

/**
 * The entries to write, after checking them: no repeats (400 validation_failed naming the
 * entry); each connection the organization's and the caller's own, or any member's with
 * `connection:manage`; each synthetic tool the organization's (else 400 unknown_reference
 * naming the entry's id).
 */
async function checkEntries(
  db: Executor,
  ctx: RequestContext,
  entries: EntryInput[],
  held: ReadonlyMap<string, 'all' | readonly string[]> = new Map(),
): Promise<repo.NewToolboxEntry[]> {
  const repeated: ValidationProblem[] = [];
  const seen = new Set<string>();
  entries.forEach((entry, i) => {
    const key = entryKey(entry);
    if (seen.has(key))
      repeated.push({
        in: 'body',
        pointer: `/entries/${i}`,
        message: `repeats the ${entry.type === 'connection' ? 'connection' : 'synthetic tool'} of an earlier entry`,
      });
    seen.add(key);
  });
  if (repeated.length > 0) throw validationError(repeated);
  const connectionIds = entries.flatMap((e) => (e.type === 'connection' ? [e.connection_id] : []));
  const toolIds = entries.flatMap((e) => (e.type === 'synthetic_tool' ? [e.synthetic_tool_id] : []));
  const connections =
    connectionIds.length === 0
      ? []
      : await db.selectFrom('connections').select(['id', 'owner_user_id']).where('org_id', '=', ctx.orgId).where('id', 'in', connectionIds).execute();
  const tools =
    toolIds.length === 0 ? [] : await db.selectFrom('synthetic_tools').select('id').where('org_id', '=', ctx.orgId).where('id', 'in', toolIds).execute();
  // A connection the toolbox already holds may stay, with the tools it had or fewer: keeping
  // it grants nobody anything new, widening it would.
  const own = new Set(connections.filter((c) => c.owner_user_id === ctx.user || managesConnections(ctx)).map((c) => c.id));
  const kept = new Set(connections.filter((c) => held.has(c.id)).map((c) => c.id));
  const known = new Set(tools.map((s) => s.id));
  const unknown: ValidationProblem[] = [];
  entries.forEach((entry, i) => {
    if (entry.type === 'connection' && !own.has(entry.connection_id)) {
      if (!kept.has(entry.connection_id)) {
        unknown.push({
          in: 'body',
          pointer: `/entries/${i}/connection_id`,
          message: 'names no connection of yours (another member’s needs connection:manage)',
        });
      } else if (!within(entry.tools, held.get(entry.connection_id) ?? [])) {
        unknown.push({
          in: 'body',
          pointer: `/entries/${i}/tools`,
          message: 'adds tools of another member’s connection to those the toolbox had (widening it needs connection:manage)',
        });
      }
    }
    if (entry.type === 'synthetic_tool' && !known.has(entry.synthetic_tool_id)) {
      unknown.push({ in: 'body', pointer: `/entries/${i}/synthetic_tool_id`, message: 'names no synthetic tool of this organization' });
    }
  });
  if (unknown.length > 0)
    throw new ApiError('unknown_reference', 'An entry names a connection or synthetic tool you cannot use in a toolbox.', { errors: unknown });
  return entries.map((e) =>
    e.type === 'connection'
      ? { type: 'connection', connection_id: e.connection_id, tools: e.tools === 'all' ? 'all' : [...e.tools] }
      : { type: 'synthetic_tool', synthetic_tool_id: e.synthetic_tool_id },
  );
}

/** Whether a tool selection takes nothing beyond another. */
function within(next: 'all' | readonly string[], had: 'all' | readonly string[]): boolean {
  if (had === 'all') return true;
  return next !== 'all' && next.every((tool) => had.includes(tool));
}

/** An entry as the audit log names it. */
const auditEntry = (e: repo.NewToolboxEntry) =>
  e.type === 'connection' ? { type: e.type, connection_id: e.connection_id, tools: e.tools } : { type: e.type, synthetic_tool_id: e.synthetic_tool_id };

export async function list(
  ctx: RequestContext,
  page: PageRequest,
  filter: { connection_id?: string; synthetic_tool_id?: string; created_by_user_id?: string },
): Promise<Page<Toolbox>> {
  const problems: ValidationProblem[] = [];
  const exists = async (table: 'connections' | 'synthetic_tools', id: string) =>
    !!(await ctx.db.selectFrom(table).select('id').where('org_id', '=', ctx.orgId).where('id', '=', id).executeTakeFirst());
  if (filter.connection_id !== undefined && !(await exists('connections', filter.connection_id))) {
    problems.push({ in: 'query', pointer: '/connection_id', message: 'names no connection of this organization' });
  }
  if (filter.synthetic_tool_id !== undefined && !(await exists('synthetic_tools', filter.synthetic_tool_id))) {
    problems.push({ in: 'query', pointer: '/synthetic_tool_id', message: 'names no synthetic tool of this organization' });
  }
  if (filter.created_by_user_id !== undefined) {
    const member = await ctx.db
      .selectFrom('memberships')
      .select('user_id')
      .where('org_id', '=', ctx.orgId)
      .where('user_id', '=', filter.created_by_user_id)
      .executeTakeFirst();
    if (!member) problems.push({ in: 'query', pointer: '/created_by_user_id', message: 'is not a member of this organization' });
  }
  if (problems.length > 0) throw new ApiError('unknown_reference', 'A filter names something that does not exist in this organization.', { errors: problems });
  const rows = await repo.listToolboxes(ctx.db, ctx.orgId, { userId: ctx.user, canManage: canManage(ctx) }, page, filter);
  const more = rows.length > page.limit;
  const shown = more ? rows.slice(0, page.limit) : rows;
  const last = shown[shown.length - 1];
  return { data: await present(ctx.db, shown), next_cursor: more && last ? cursorAfter(last.id) : null };
}

export async function get(ctx: RequestContext, id: string): Promise<Toolbox> {
  return presentOne(ctx.db, await visible(ctx, id));
}

export async function create(ctx: RequestContext, body: Create): Promise<Toolbox> {
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const entries = await checkEntries(w.db, ctx, body.entries ?? []);
      await requireWithinLimit(w.db, ctx.orgId, 'toolboxes', () => repo.countToolboxes(w.db, ctx.orgId));
      const row = await repo.insertToolbox(w.db, {
        id: newId('toolbox'),
        org_id: ctx.orgId,
        name: body.name,
        description: body.description ?? null,
        created_by_user_id: ctx.user,
      });
      await repo.replaceEntries(w.db, row.id, entries);
      w.audit({ targetId: row.id, changes: { name: row.name, description: row.description, entries: entries.map(auditEntry) } });
      return presentOne(w.db, row);
    }),
  );
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<Toolbox> {
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const before = await repo.findToolbox(w.db, ctx.orgId, id, true);
      if (!before) throw notFound(WHAT, id);
      const changes: { name?: string; description?: string | null } = {};
      if (body.name !== undefined && body.name !== before.name) changes.name = body.name;
      if (body.description !== undefined && body.description !== before.description) changes.description = body.description;
      const changed: string[] = Object.keys(changes);
      const audited: { before: Record<string, unknown>; after: Record<string, unknown> } = { before: { ...before }, after: { ...changes } };
      if (body.entries !== undefined) {
        const stored = (await repo.toolboxEntries(w.db, [id])).get(id) ?? [];
        const next = await checkEntries(
          w.db,
          ctx,
          body.entries,
          new Map(stored.flatMap((e) => (e.connection_id ? [[e.connection_id, e.tools ?? 'all'] as const] : []))),
        );
        const current = stored.map((e): repo.NewToolboxEntry =>
          e.type === 'connection'
            ? { type: 'connection', connection_id: e.connection_id as string, tools: e.tools ?? 'all' }
            : { type: 'synthetic_tool', synthetic_tool_id: e.synthetic_tool_id as string },
        );
        const sig = (e: repo.NewToolboxEntry) => JSON.stringify(auditEntry(e));
        if (current.map(sig).join('\n') !== next.map(sig).join('\n')) {
          await repo.replaceEntries(w.db, id, next);
          changed.push('entries');
          audited.before.entries = current.map(auditEntry);
          audited.after.entries = next.map(auditEntry);
        }
      }
      const row = changed.length > 0 ? await repo.updateToolbox(w.db, ctx.orgId, id, changes) : before;
      // Entries carry tool lists (hundreds of names): the entry records their digest.
      w.audit({ targetId: id, changes: changedMembers(audited.before, audited.after, { digests: ['entries'] }) });
      return presentOne(w.db, row);
    }),
  );
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await repo.findToolbox(w.db, ctx.orgId, id, true);
    if (!row) throw notFound(WHAT, id);
    // MCP servers minted for its dynamic user toolboxes become unavailable here (the toolboxDeleted hook).
    await ctx.deps.hooks.run('toolboxDeleted', w, ctx.orgId, id);
    await deleteSharesOf(w.db, ctx.orgId, 'toolbox', id);
    await repo.deleteToolbox(w.db, ctx.orgId, id);
    w.audit({ targetId: id, changes: { name: row.name } });
  });
}

export async function listToolboxShares(ctx: RequestContext, id: string, page: PageRequest): Promise<Page<Share>> {
  await visible(ctx, id);
  return listShares(ctx.db, ctx.orgId, 'toolbox', id, page);
}

/**
 * A share lets its principals call the toolbox's tools through its connections, each acting
 * with its owner's credentials: who may do that with a member's upstream account is that
 * member's call (or an administrator's, with `connection:manage`), not a curator's. So sharing
 * a toolbox that holds another member's connection, or changing such a share, is 403
 * `not_connection_owner` for a caller who neither owns every such connection nor holds
 * `connection:manage`. The toolbox is locked by the caller, so its entries cannot change meanwhile.
 */
async function checkMayShareConnections(db: Executor, ctx: RequestContext, id: string): Promise<void> {
  if (managesConnections(ctx)) return;
  const entries = (await repo.toolboxEntries(db, [id])).get(id) ?? [];
  const others = [
    ...new Set(entries.flatMap((e) => (e.type === 'connection' && e.connection_owner_user_id !== ctx.user && e.connection_id ? [e.connection_id] : []))),
  ];
  if (others.length > 0) {
    throw new ApiError(
      'not_connection_owner',
      `Toolbox ${id} holds ${others.length === 1 ? 'a connection' : 'connections'} of other members (${others.join(', ')}), which act with their owners' credentials; only a holder of connection:manage may share it, or remove ${others.length === 1 ? 'that entry' : 'those entries'} first.`,
    );
  }
}

export async function share(ctx: RequestContext, id: string, body: ShareCreate): Promise<{ share: Share; created: boolean }> {
  return ctx.write(async (w) => {
    if (!(await repo.findToolbox(w.db, ctx.orgId, id, true))) throw notFound(WHAT, id);
    await checkMayShareConnections(w.db, ctx, id);
    const result = await shareResource(w.db, { orgId: ctx.orgId, resourceType: 'toolbox', resourceId: id, share: body, byUserId: ctx.user });
    // People it reaches again get back what a revoked share had taken (their MCP servers for it).
    await ctx.deps.hooks.run('toolboxAccessChanged', w, ctx.orgId, id);
    w.audit({ targetId: id, changes: shareAuditChanges(result, body) });
    return result;
  });
}

export async function revokeToolboxShare(ctx: RequestContext, id: string, shareId: string): Promise<void> {
  await ctx.write(async (w) => {
    if (!(await repo.findToolbox(w.db, ctx.orgId, id, true))) throw notFound(WHAT, id);
    const revoked = await revokeShare(w.db, ctx.orgId, 'toolbox', id, shareId);
    if (!revoked) throw new ApiError('not_found', `No share ${shareId} of toolbox ${id} in this organization.`);
    await ctx.deps.hooks.run('toolboxAccessChanged', w, ctx.orgId, id);
    w.audit({ targetId: id, changes: { share_id: shareId, principal: { type: revoked.principal_type, id: revoked.principal_id }, level: revoked.level } });
  });
}
