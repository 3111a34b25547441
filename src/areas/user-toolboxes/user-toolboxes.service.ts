import type { components } from '../../../generated/openapi';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, type ValidationProblem } from '../../http/errors';
import type { Page, PageRequest } from '../../http/pagination';
import { cursorAfter } from '../../http/pagination';
import { newId } from '../../lib/ids';
import * as serversOfBoxes from './mcp-servers.repo';
import {
  DYN_ALL,
  dynamicIdOf,
  isDynamicId,
  load,
  resolveDynAll,
  resolveDynToolbox,
  resolveStored,
  resolveUserToolbox,
  type Binding,
  type ResolvedUserToolbox,
  type TemplateEntry,
} from './resolve';
import { findVisibleTemplate, toolboxesSharedWith, type ToolboxRow } from './sources';
import * as repo from './user-toolboxes.repo';
import * as serversRepo from './mcp-servers.repo';
import type { WriteScope } from '../../http/context';

type UserToolbox = components['schemas']['UserToolbox'];
type Create = components['schemas']['UserToolboxCreate'];
type Update = components['schemas']['UserToolboxUpdate'];
type Kind = components['schemas']['UserToolboxKind'];

const WHAT = 'user toolbox';
const NAME_MAX = 100;

export const USER_TOOLBOX_ID = /^utbx_(?:[0-7][0-9a-hjkmnp-tv-z]{25}|dyn_all|dyn_tbx_[0-7][0-9a-hjkmnp-tv-z]{25})$/;

function toUserToolbox(box: ResolvedUserToolbox, mcpServers: number): UserToolbox {
  return {
    id: box.id,
    kind: box.kind,
    name: box.name,
    description: box.description,
    template_id: box.templateId,
    toolbox_id: box.toolboxId,
    entries: box.entries,
    bindings: box.bindings,
    status: box.status,
    incomplete_connector_slugs: box.incompleteConnectorSlugs,
    owner_user_id: box.ownerUserId,
    mcp_server_count: mcpServers,
    created_at: box.createdAt.toISOString(),
    updated_at: box.updatedAt.toISOString(),
  };
}

async function answer(ctx: RequestContext, boxes: ResolvedUserToolbox[]): Promise<UserToolbox[]> {
  const counts = await serversOfBoxes.countsByUserToolbox(
    ctx.db,
    ctx.orgId,
    ctx.user,
    boxes.map((b) => b.id),
  );
  return boxes.map((box) => toUserToolbox(box, counts.get(box.id) ?? 0));
}

const immutable = (id: string) =>
  new ApiError(
    'dynamic_toolbox_immutable',
    `${id} is a dynamic user toolbox, computed from ${id === DYN_ALL ? 'your connections' : 'a toolbox shared with you'}; change that instead.`,
  );

const nameTaken = (name: string) => new ApiError('name_taken', `You already have a user toolbox named "${name}" in this organization.`);

const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined ? run() : conflictOnUnique(repo.NAME_CONSTRAINT, () => nameTaken(name), run);

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

/**
 * Ordered by id, which puts the stored ones first (`utbx_` + a ULID starting with a digit),
 * then `utbx_dyn_all`, then `utbx_dyn_tbx_…` in toolbox id order: the cursor is the last id.
 */
export async function list(ctx: RequestContext, page: PageRequest, filter: { kind?: Kind; template_id?: string }): Promise<Page<UserToolbox>> {
  const { orgId, user } = { orgId: ctx.orgId, user: ctx.user };
  if (filter.template_id !== undefined) {
    const canManage = ctx.org?.permissions.has('template:manage') ?? false;
    const known =
      (await findVisibleTemplate(ctx.db, orgId, user, canManage, filter.template_id)) || (await repo.ownerHasTemplate(ctx.db, orgId, user, filter.template_id));
    if (!known) {
      throw new ApiError('unknown_reference', `No template ${filter.template_id} that you can see.`, {
        errors: [{ in: 'query', pointer: '/template_id', message: 'names no template you can see' }],
      });
    }
  }
  const after = page.after;
  const afterStored = after !== undefined && !isDynamicId(after);
  // Stored ones come first: read them while the cursor is still among them.
  const wantStored = filter.kind !== 'dynamic' && (after === undefined || afterStored);
  const stored = wantStored ? await repo.listOwned(ctx.db, orgId, user, { after, limit: page.limit + 1, templateId: filter.template_id }) : [];
  const wantDynamic = filter.kind !== 'template' && filter.template_id === undefined && stored.length <= page.limit;
  const ids: { id: string; toolbox?: ToolboxRow }[] = stored.map((r) => ({ id: r.id }));
  const toolboxes = wantDynamic ? await toolboxesSharedWith(ctx.db, orgId, user) : [];
  if (wantDynamic) {
    ids.push({ id: DYN_ALL });
    for (const toolbox of toolboxes) ids.push({ id: dynamicIdOf(toolbox.id), toolbox });
  }
  const rest = after === undefined ? ids : ids.filter((i) => i.id > after);
  const shown = rest.slice(0, page.limit);
  const more = rest.length > page.limit;

  const shownStored = stored.filter((r) => shown.some((i) => i.id === r.id));
  const shownToolboxes = shown.flatMap((i) => (i.toolbox ? [i.toolbox] : []));
  const dynAll = shown.some((i) => i.id === DYN_ALL);
  const loaded = await load(ctx.db, orgId, user, { stored: shownStored, dynAll, toolboxes: shownToolboxes });
  const boxes = shown.map((i) => {
    if (i.id === DYN_ALL) return resolveDynAll(loaded);
    if (i.toolbox) return resolveDynToolbox(loaded, i.toolbox);
    return resolveStored(
      loaded,
      shownStored.find((r) => r.id === i.id)!,
    );
  });
  const last = shown[shown.length - 1];
  return { data: await answer(ctx, boxes), next_cursor: more && last ? cursorAfter(last.id) : null };
}

export async function get(ctx: RequestContext, id: string): Promise<UserToolbox> {
  const box = await resolveUserToolbox(ctx.db, ctx.orgId, ctx.user, id);
  if (!box) throw notFound(WHAT, id);
  return (await answer(ctx, [box]))[0]!;
}

// ---------------------------------------------------------------------------------------
// Bindings: each connector of the entries to one of the owner's own connections of it
// ---------------------------------------------------------------------------------------

/** 400 (`validation_failed`, or `unknown_reference` when every problem is a connection that does not exist) unless the bindings fit. */
async function checkBindings(ctx: RequestContext, db: RequestContext['db'], entries: TemplateEntry[], bindings: readonly Binding[]): Promise<void> {
  const slugs = new Set(entries.map((e) => e.connector_slug));
  const connections = new Map((await repo.connectionStates(db, ctx.orgId, [...new Set(bindings.map((b) => b.connection_id))])).map((c) => [c.id, c]));
  const invalid: ValidationProblem[] = [];
  const unknown: ValidationProblem[] = [];
  const seen = new Set<string>();
  bindings.forEach((binding, i) => {
    const at = `/bindings/${i}`;
    if (!slugs.has(binding.connector_slug)) invalid.push({ in: 'body', pointer: `${at}/connector_slug`, message: 'is not a connector of the template' });
    else if (seen.has(binding.connector_slug)) invalid.push({ in: 'body', pointer: `${at}/connector_slug`, message: 'is bound twice' });
    seen.add(binding.connector_slug);
    const connection = connections.get(binding.connection_id);
    if (!connection) unknown.push({ in: 'body', pointer: `${at}/connection_id`, message: 'names no connection of this organization' });
    else if (connection.owner_user_id !== ctx.user) invalid.push({ in: 'body', pointer: `${at}/connection_id`, message: 'is not one of your own connections' });
    else if (slugs.has(binding.connector_slug) && connection.connector_slug !== binding.connector_slug) {
      invalid.push({
        in: 'body',
        pointer: `${at}/connection_id`,
        message: `is a connection of ${connection.connector_slug}, not of ${binding.connector_slug}`,
      });
    }
  });
  if (invalid.length > 0) {
    throw new ApiError('validation_failed', 'The bindings do not fit: each connector of the template, once, to one of your own connections of it.', {
      errors: [...invalid, ...unknown],
    });
  }
  if (unknown.length > 0)
    throw new ApiError('unknown_reference', 'A binding names a connection that does not exist in this organization.', { errors: unknown });
}

/** The template's name, or with ` (2)`, ` (3)`… when the caller already uses it. */
async function freeName(ctx: RequestContext, base: string): Promise<string> {
  const taken = await repo.namesStartingWith(ctx.db, ctx.orgId, ctx.user, base.slice(0, NAME_MAX - 6));
  if (!taken.has(base)) return base;
  for (let n = 2; ; n += 1) {
    const suffix = ` (${n})`;
    const name = `${base.slice(0, NAME_MAX - suffix.length)}${suffix}`;
    if (!taken.has(name)) return name;
  }
}

// ---------------------------------------------------------------------------------------
// Writes (template kind only)
// ---------------------------------------------------------------------------------------

export async function create(ctx: RequestContext, body: Create): Promise<UserToolbox> {
  const canManage = ctx.org?.permissions.has('template:manage') ?? false;
  const template = await findVisibleTemplate(ctx.db, ctx.orgId, ctx.user, canManage, body.template_id);
  if (!template) {
    throw new ApiError('unknown_reference', `No template ${body.template_id} that you can see.`, {
      errors: [{ in: 'body', pointer: '/template_id', message: 'names no template you can see' }],
    });
  }
  const entries = template.entries as TemplateEntry[];
  const bindings = body.bindings ?? [];
  await checkBindings(ctx, ctx.db, entries, bindings);
  const insert = (name: string) =>
    guardName(name, () =>
      ctx.write(async (w) => {
        // Checked again inside: a connection may have changed hands since.
        await checkBindings(ctx, w.db, entries, bindings);
        const id = newId('userToolbox');
        const inserted = await repo.insert(w.db, {
          id,
          org_id: ctx.orgId,
          owner_user_id: ctx.user,
          template_id: template.id,
          name,
          description: body.description ?? null,
          entries: JSON.stringify(entries),
        });
        await repo.replaceBindings(w.db, id, bindings);
        w.audit({ targetId: id, changes: { name, template_id: template.id, description: body.description ?? null, bindings } });
        return inserted;
      }),
    );
  let row: repo.UserToolboxRow;
  if (body.name !== undefined) row = await insert(body.name);
  else {
    // A default name another request of the caller took meanwhile: pick the next free one.
    for (let attempt = 1; ; attempt += 1) {
      try {
        row = await insert(await freeName(ctx, template.name));
        break;
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 'name_taken') || attempt >= 3) throw err;
      }
    }
  }
  return get(ctx, row.id);
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<UserToolbox> {
  if (isDynamicId(id)) throw immutable(id);
  await guardName(body.name, () =>
    ctx.write(async (w) => {
      const row = await repo.findOwned(w.db, ctx.orgId, ctx.user, id, true);
      if (!row) throw notFound(WHAT, id);
      const bound = (list: readonly Binding[]) =>
        [...list]
          .map((b) => ({ connector_slug: b.connector_slug, connection_id: b.connection_id }))
          .sort((a, b) => (a.connector_slug < b.connector_slug ? -1 : 1));
      const before = { name: row.name, description: row.description, bindings: bound((await repo.bindingsOf(w.db, [id])).get(id) ?? []) };
      if (body.bindings !== undefined) {
        await checkBindings(ctx, w.db, row.entries as TemplateEntry[], body.bindings);
        await repo.replaceBindings(w.db, id, body.bindings);
      }
      const changes: { name?: string; description?: string | null } = {};
      if (body.name !== undefined) changes.name = body.name;
      if (body.description !== undefined) changes.description = body.description;
      await repo.update(w.db, ctx.orgId, id, changes);
      w.audit({ targetId: id, changes: changedMembers(before, { ...changes, bindings: body.bindings && bound(body.bindings) }) });
    }),
  );
  return get(ctx, id);
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  if (isDynamicId(id)) throw immutable(id);
  await ctx.write(async (w) => {
    const row = await repo.findOwned(w.db, ctx.orgId, ctx.user, id, true);
    if (!row) throw notFound(WHAT, id);
    const servers = await serversOfBoxes.removeOfUserToolbox(w.db, ctx.orgId, id);
    await repo.remove(w.db, ctx.orgId, id);
    w.audit({ targetId: id, changes: { name: row.name, template_id: row.template_id, mcp_servers: servers } });
  });
}

// ---------------------------------------------------------------------------------------
// When a member leaves
// ---------------------------------------------------------------------------------------

/**
 * The member's membership ended (removeMember): their stored user toolboxes are deleted, with
 * what each delete takes along (its MCP servers), then every
 * MCP server left of theirs (those of dynamic user toolboxes): the endpoints stop answering.
 */
export async function onMemberRemoved(w: WriteScope, orgId: string, userId: string): Promise<void> {
  for (const row of await repo.listOwned(w.db, orgId, userId, { limit: 1_000_000 })) await serversOfBoxes.removeOfUserToolbox(w.db, orgId, row.id);
  await repo.removeAllOwned(w.db, orgId, userId);
  await serversRepo.removeOfOwner(w.db, orgId, userId);
}
