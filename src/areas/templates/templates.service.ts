import type { components } from '../../../generated/openapi';
import { listShares, revokeShare, shareResource, shareAuditChanges, deleteSharesOf, type Share } from '../../access/shares';
import type { Executor } from '../../db/database';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError, type ValidationProblem } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { lookup, visibleTo } from '../connectors';
import * as repo from './templates.repo';

type Template = components['schemas']['Template'];
type Create = components['schemas']['TemplateCreate'];
type Update = components['schemas']['TemplateUpdate'];
type Transfer = components['schemas']['TemplateTransfer'];
type EntryInput = components['schemas']['TemplateEntry'];
type ShareCreate = components['schemas']['ShareCreate'];

const WHAT = 'template';

const canManage = (ctx: RequestContext) => ctx.org?.permissions.has('template:manage') ?? false;
const seesAllConnectors = (ctx: RequestContext) => ctx.org?.permissions.has('connector:manage') ?? false;

export function toTemplate(row: repo.TemplateRow): Template {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    owner_user_id: row.owner_user_id,
    entries: row.entries.map((e) => ({ connector_slug: e.connector_slug, tools: e.tools === 'all' ? 'all' : [...e.tools] })),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

const nameTaken = (name: string) => new ApiError('name_taken', `Another template of this organization is named "${name}".`);

const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined ? run() : conflictOnUnique(repo.NAME_CONSTRAINT, () => nameTaken(name), run);

/** A template the caller sees; 404 otherwise (never revealing that it exists). */
async function visible(ctx: RequestContext, id: string): Promise<repo.TemplateRow> {
  const row = await repo.findVisibleTemplate(ctx.db, ctx.orgId, ctx.user, canManage(ctx), id);
  if (!row) throw notFound(WHAT, id);
  return row;
}

/** A connector's slug as the caller sees it, with the names of the tools it declares; null when not visible. */
async function connectorTools(db: Executor, ctx: RequestContext, slug: string): Promise<Set<string> | null> {
  const found = await lookup(db, ctx.orgId, slug);
  if (!found) return null;
  if (found.source === 'custom' && !(await visibleTo(db, ctx.orgId, ctx.user, seesAllConnectors(ctx), slug))) return null;
  const content = found.source === 'custom' ? found.row.content : found.content;
  return new Set(content.tools.map((t) => t.name));
}

/**
 * The entries as stored, after checking them: at most one per connector (400
 * validation_failed), each connector one the caller sees (400 unknown_reference), each named
 * tool among the connector's `tools` (400 validation_failed).
 */
async function checkEntries(db: Executor, ctx: RequestContext, entries: EntryInput[]): Promise<repo.StoredTemplateEntry[]> {
  const invalid: ValidationProblem[] = [];
  const unknown: ValidationProblem[] = [];
  const seen = new Set<string>();
  for (const [i, entry] of entries.entries()) {
    if (seen.has(entry.connector_slug)) {
      invalid.push({ in: 'body', pointer: `/entries/${i}/connector_slug`, message: `repeats the connector ${entry.connector_slug}` });
      continue;
    }
    seen.add(entry.connector_slug);
    const tools = await connectorTools(db, ctx, entry.connector_slug);
    if (!tools) {
      unknown.push({ in: 'body', pointer: `/entries/${i}/connector_slug`, message: 'names no connector you can see' });
      continue;
    }
    if (entry.tools !== 'all') {
      for (const [j, name] of entry.tools.entries()) {
        if (!tools.has(name))
          invalid.push({ in: 'body', pointer: `/entries/${i}/tools/${j}`, message: `is not a tool of the connector ${entry.connector_slug}` });
      }
    }
  }
  if (invalid.length > 0) throw validationError(invalid);
  if (unknown.length > 0)
    throw new ApiError('unknown_reference', 'An entry names a connector that does not exist or that you cannot see.', { errors: unknown });
  return entries.map((e) => ({ connector_slug: e.connector_slug, tools: e.tools === 'all' ? 'all' : [...e.tools] }));
}

async function isMember(db: Executor, orgId: string, userId: string, activeOnly: boolean): Promise<boolean> {
  const row = await db
    .selectFrom('memberships')
    .select('user_id')
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .$if(activeOnly, (q) => q.where('status', '=', 'active'))
    .executeTakeFirst();
  return !!row;
}

export async function list(ctx: RequestContext, page: PageRequest, filter: { owner_user_id?: string; connector_slug?: string }): Promise<Page<Template>> {
  const problems: ValidationProblem[] = [];
  if (filter.owner_user_id !== undefined && !(await isMember(ctx.db, ctx.orgId, filter.owner_user_id, false))) {
    problems.push({ in: 'query', pointer: '/owner_user_id', message: 'is not a member of this organization' });
  }
  if (filter.connector_slug !== undefined && !(await connectorTools(ctx.db, ctx, filter.connector_slug))) {
    problems.push({ in: 'query', pointer: '/connector_slug', message: 'names no connector you can see' });
  }
  if (problems.length > 0)
    throw new ApiError('unknown_reference', 'A filter names something that does not exist or that you cannot see.', { errors: problems });
  const rows = await repo.listTemplates(ctx.db, ctx.orgId, { userId: ctx.user, canManage: canManage(ctx) }, page, filter);
  return toPage(rows, page, toTemplate);
}

export async function get(ctx: RequestContext, id: string): Promise<Template> {
  return toTemplate(await visible(ctx, id));
}

export async function create(ctx: RequestContext, body: Create): Promise<Template> {
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const entries = await checkEntries(w.db, ctx, body.entries);
      const row = await repo.insertTemplate(w.db, {
        id: newId('template'),
        org_id: ctx.orgId,
        name: body.name,
        description: body.description ?? null,
        owner_user_id: ctx.user,
        entries,
      });
      w.audit({ targetId: row.id, changes: { name: row.name, description: row.description, entries } });
      return toTemplate(row);
    }),
  );
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<Template> {
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const before = await repo.findTemplate(w.db, ctx.orgId, id, true);
      if (!before) throw notFound(WHAT, id);
      const entries = body.entries !== undefined ? await checkEntries(w.db, ctx, body.entries) : undefined;
      const changes: Parameters<typeof repo.updateTemplate>[3] = {};
      if (body.name !== undefined && body.name !== before.name) changes.name = body.name;
      if (body.description !== undefined && body.description !== before.description) changes.description = body.description;
      if (entries !== undefined && JSON.stringify(entries) !== JSON.stringify(before.entries)) changes.entries = entries;
      const changed = Object.keys(changes);
      const row = changed.length > 0 ? await repo.updateTemplate(w.db, ctx.orgId, id, changes) : before;
      // Entries carry tool lists (hundreds of names): the entry records their digest.
      w.audit({ targetId: id, changes: changedMembers(before, changes, { digests: ['entries'] }) });
      return toTemplate(row);
    }),
  );
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await repo.deleteTemplate(w.db, ctx.orgId, id);
    if (!row) throw notFound(WHAT, id);
    await deleteSharesOf(w.db, ctx.orgId, 'template', id);
    w.audit({ targetId: id, changes: { name: row.name, owner_user_id: row.owner_user_id } });
  });
}

export async function transfer(ctx: RequestContext, id: string, body: Transfer): Promise<Template> {
  return ctx.write(async (w) => {
    const before = await repo.findTemplate(w.db, ctx.orgId, id, true);
    if (!before) throw notFound(WHAT, id);
    if (!(await isMember(w.db, ctx.orgId, body.user_id, true))) {
      throw new ApiError('unknown_reference', `${body.user_id} is not an active member of this organization.`, {
        errors: [{ in: 'body', pointer: '/user_id', message: 'is not an active member of this organization' }],
      });
    }
    if (before.owner_user_id === body.user_id) throw new ApiError('conflict', `${body.user_id} already owns template ${id}.`);
    const row = await repo.updateTemplate(w.db, ctx.orgId, id, { owner_user_id: body.user_id });
    w.audit({ targetId: id, changes: { owner_user_id: { from: before.owner_user_id, to: body.user_id } } });
    return toTemplate(row);
  });
}

export async function listTemplateShares(ctx: RequestContext, id: string, page: PageRequest): Promise<Page<Share>> {
  await visible(ctx, id);
  return listShares(ctx.db, ctx.orgId, 'template', id, page);
}

export async function share(ctx: RequestContext, id: string, body: ShareCreate): Promise<{ share: Share; created: boolean }> {
  return ctx.write(async (w) => {
    if (!(await repo.findTemplate(w.db, ctx.orgId, id, true))) throw notFound(WHAT, id);
    const result = await shareResource(w.db, { orgId: ctx.orgId, resourceType: 'template', resourceId: id, share: body, byUserId: ctx.user });
    w.audit({ targetId: id, changes: shareAuditChanges(result, body) });
    return result;
  });
}

export async function revokeTemplateShare(ctx: RequestContext, id: string, shareId: string): Promise<void> {
  await ctx.write(async (w) => {
    if (!(await repo.findTemplate(w.db, ctx.orgId, id, true))) throw notFound(WHAT, id);
    const revoked = await revokeShare(w.db, ctx.orgId, 'template', id, shareId);
    if (!revoked) throw new ApiError('not_found', `No share ${shareId} of template ${id} in this organization.`);
    w.audit({ targetId: id, changes: { share_id: shareId, principal: { type: revoked.principal_type, id: revoked.principal_id }, level: revoked.level } });
  });
}
