import type { components } from '../../../generated/openapi';
import { requireFeature } from '../../access/entitlements';
import { rolePermissions } from '../../identity/permissions';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { restrictionsNaming } from '../restrictions';
import * as repo from './roles.repo';

type Role = components['schemas']['Role'];
type Create = components['schemas']['RoleCreate'];
type Update = components['schemas']['RoleUpdate'];

const WHAT = 'role';

/** A role's permissions as the spec shows them: sorted; a system role's from the catalog. */
export const permissionsOf = (row: Pick<repo.RoleRow, 'system_key' | 'permissions'>): string[] => [...new Set(rolePermissions(row))].sort();

export function toRole(row: repo.RoleRow, memberCount: number): Role {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    permissions: permissionsOf(row) as Role['permissions'],
    is_system: row.is_system,
    system_key: row.system_key,
    seat_class: row.seat_class,
    member_count: memberCount,
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

const eventRole = (row: repo.RoleRow) => ({ id: row.id, name: row.name, permissions: permissionsOf(row) as Role['permissions'] });

const nameTaken = (name: string) =>
  new ApiError('name_taken', `A role of this organization is already named "${name}" (names are compared without regard to case, system roles included).`);
const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined
    ? run()
    : conflictOnUnique(
        repo.ROLE_NAME_CONSTRAINT,
        () => nameTaken(name),
        () => conflictOnUnique('roles_org_id_name_key', () => nameTaken(name), run),
      );

const immutable = (row: repo.RoleRow) =>
  new ApiError('system_role_immutable', `${row.name} is a system role; system roles cannot be changed or deleted. Create a custom role instead.`);

/**
 * 403 `permission_escalation` unless the caller holds every permission named: nobody puts in a
 * role (or gives a member) what it does not hold itself. For an API token, what it holds is
 * its own list intersected with its owner's roles.
 */
export function requireHeld(ctx: RequestContext, permissions: Iterable<string>, what: string): void {
  const held = ctx.org?.permissions ?? new Set<string>();
  const missing = [...new Set(permissions)].filter((p) => !held.has(p)).sort();
  if (missing.length > 0) {
    throw new ApiError('permission_escalation', `You cannot ${what} with permissions you do not hold yourself: ${missing.join(', ')}.`);
  }
}

export async function list(ctx: RequestContext, page: PageRequest, filter: { is_system?: boolean }): Promise<Page<Role>> {
  const rows = await repo.listRoles(ctx.db, ctx.orgId, page, { isSystem: filter.is_system });
  const counts = await repo.memberCounts(
    ctx.db,
    ctx.orgId,
    rows.slice(0, page.limit).map((r) => r.id),
  );
  return toPage(rows, page, (row) => toRole(row, counts.get(row.id) ?? 0));
}

export async function get(ctx: RequestContext, id: string): Promise<Role> {
  const row = await repo.findRole(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  const counts = await repo.memberCounts(ctx.db, ctx.orgId, [id]);
  return toRole(row, counts.get(id) ?? 0);
}

export async function create(ctx: RequestContext, body: Create): Promise<Role> {
  await requireFeature(ctx.db, ctx.orgId, 'custom_roles');
  requireHeld(ctx, body.permissions, 'create a role');
  const permissions = [...new Set(body.permissions)].sort();
  const row = await guardName(body.name, () =>
    ctx.write(async (w) => {
      const inserted = await repo.insertRole(w.db, {
        id: newId('role'),
        org_id: ctx.orgId,
        name: body.name,
        description: body.description ?? null,
        permissions,
        is_system: false,
        system_key: null,
        seat_class: 'billable',
        created_by_user_id: ctx.user,
      });
      w.audit({ targetId: inserted.id, changes: { name: inserted.name, description: inserted.description, permissions, seat_class: inserted.seat_class } });
      w.emit('role.created', { role: eventRole(inserted) });
      return inserted;
    }),
  );
  return toRole(row, 0);
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<Role> {
  const row = await guardName(body.name, () =>
    ctx.write(async (w) => {
      const current = await repo.findRole(w.db, ctx.orgId, id, true);
      if (!current) throw notFound(WHAT, id);
      if (current.is_system) throw immutable(current);
      const changes: Parameters<typeof repo.updateRole>[3] = {};
      const before: Record<string, unknown> = {};
      const after: Record<string, unknown> = {};
      const changed: ('name' | 'description' | 'permissions')[] = [];
      if (body.name !== undefined && body.name !== current.name) {
        changes.name = after.name = body.name;
        before.name = current.name;
        changed.push('name');
      }
      if (body.description !== undefined && body.description !== current.description) {
        changes.description = after.description = body.description;
        before.description = current.description;
        changed.push('description');
      }
      if (body.permissions !== undefined) {
        const next = [...new Set(body.permissions)].sort();
        // Adding needs the permission; taking away is always allowed.
        requireHeld(
          ctx,
          next.filter((p) => !current.permissions.includes(p)),
          'add to a role',
        );
        if (next.join(' ') !== [...current.permissions].sort().join(' ')) {
          changes.permissions = after.permissions = next;
          before.permissions = current.permissions;
          changed.push('permissions');
        }
      }
      const updated = changed.length > 0 ? await repo.updateRole(w.db, ctx.orgId, id, changes) : current;
      if (!updated) throw notFound(WHAT, id);
      w.audit({ targetId: id, changes: changedMembers(before, after) });
      if (changed.length > 0) w.emit('role.updated', { role: eventRole(updated), changed });
      return updated;
    }),
  );
  return toRole(row, (await repo.memberCounts(ctx.db, ctx.orgId, [id])).get(id) ?? 0);
}

/** What still names the role, in words; empty when nothing does. */
async function usages(ctx: RequestContext, db: Parameters<typeof repo.memberCounts>[0], orgId: string, id: string): Promise<string[]> {
  const found: string[] = [];
  const members = (await repo.memberCounts(db, orgId, [id])).get(id) ?? 0;
  if (members > 0) found.push(`${members} member${members === 1 ? '' : 's'} (${members === 1 ? 'holds' : 'hold'} it)`);
  const restrictions = await restrictionsNaming(db, orgId, { roleId: id });
  if (restrictions.length > 0) found.push(`${restrictions.length} restriction${restrictions.length === 1 ? '' : 's'} (${restrictions.join(', ')})`);
  found.push(...(await ctx.deps.hooks.usages('roleUsage', db, orgId, id)));
  return found;
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const current = await repo.findRole(w.db, ctx.orgId, id, true);
    if (!current) throw notFound(WHAT, id);
    if (current.is_system) throw immutable(current);
    const used = await usages(ctx, w.db, ctx.orgId, id);
    if (used.length > 0) throw new ApiError('role_in_use', `${current.name} is still named by ${used.join(' and ')}; reassign those first.`);
    await repo.deleteRole(w.db, ctx.orgId, id);
    w.audit({ targetId: id, changes: { name: current.name, description: current.description, permissions: current.permissions } });
    w.emit('role.deleted', { role: eventRole(current) });
  });
}
