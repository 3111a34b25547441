import type { components } from '../../../generated/openapi';
import { requireWithinLimit } from '../../access/entitlements';
import { seatsInUse } from '../../access/seats';
import { heldPermissions } from '../../identity/permissions';
import type { RequestContext, WriteScope } from '../../http/context';
import { ApiError, notFound, type ValidationProblem } from '../../http/errors';
import { cursorAfter, keyedPageRequest, type Page } from '../../http/pagination';
import { permissionsOf, requireHeld } from '../roles';
import { rolesIn } from '../roles';
import * as repo from './members.repo';

type Member = components['schemas']['Member'];
type Update = components['schemas']['MemberUpdate'];
type Status = components['schemas']['MembershipStatus'];

const WHAT = 'member';

function toMember(row: repo.MemberRow, roles: repo.HeldRole[], teams: { id: string; name: string }[]): Member {
  const permissions = heldPermissions(
    roles.filter((r) => r.system_key === null).flatMap((r) => r.permissions),
    roles.flatMap((r) => (r.system_key === null ? [] : [r.system_key])),
  );
  return {
    user_id: row.user_id,
    user: { id: row.user_id, email: row.email, name: row.name, avatar_url: row.avatar_url },
    status: row.status,
    status_reason: row.status_reason,
    via: row.via,
    joined_at: row.joined_at.toISOString(),
    roles: roles.map((r) => ({ id: r.id, name: r.name, is_system: r.is_system, seat_class: r.seat_class })),
    teams,
    permissions: [...permissions].sort() as Member['permissions'],
    has_second_factor: row.has_second_factor,
    updated_at: row.updated_at.toISOString(),
  };
}

async function present(ctx: RequestContext, rows: repo.MemberRow[]): Promise<Member[]> {
  const ids = rows.map((r) => r.user_id);
  const [roles, teams] = await Promise.all([repo.rolesOf(ctx.db, ctx.orgId, ids), repo.teamsOf(ctx.db, ctx.orgId, ids)]);
  return rows.map((row) => toMember(row, roles.get(row.user_id) ?? [], teams.get(row.user_id) ?? []));
}

/** Everything a member's roles grant: what taking them all away (suspending, removing) takes. */
const heldPermissionsOf = (roles: readonly repo.HeldRole[]): string[] => roles.flatMap((r) => permissionsOf(r));

const eventMember = (row: repo.MemberRow) => ({ user_id: row.user_id, email: row.email, name: row.name });

// The cursor carries the last member's joining time (microseconds) and user id: members are listed in the order they joined.
const KEY = /^(\d{1,16})~(usr_[0-7][0-9a-hjkmnp-tv-z]{25})$/;

export async function list(
  ctx: RequestContext,
  query: { limit?: number; cursor?: string; status?: Status; role_id?: string; team_id?: string; q?: string },
): Promise<Page<Member>> {
  const page = keyedPageRequest(query, (key) => KEY.test(key));
  const unknown: ValidationProblem[] = [];
  if (query.role_id !== undefined && (await rolesIn(ctx.db, ctx.orgId, [query.role_id])).length === 0) {
    unknown.push({ in: 'query', pointer: '/role_id', message: 'names no role of this organization' });
  }
  if (
    query.team_id !== undefined &&
    !(await ctx.db.selectFrom('teams').select('id').where('org_id', '=', ctx.orgId).where('id', '=', query.team_id).executeTakeFirst())
  ) {
    unknown.push({ in: 'query', pointer: '/team_id', message: 'names no team of this organization' });
  }
  if (unknown.length > 0) throw new ApiError('unknown_reference', 'A filter names something that does not exist in this organization.', { errors: unknown });
  const match = page.after === undefined ? null : KEY.exec(page.after);
  const rows = await repo.listMembers(
    ctx.db,
    ctx.orgId,
    { limit: page.limit, after: match ? { joinedUs: match[1] as string, userId: match[2] as string } : undefined },
    { status: query.status, roleId: query.role_id, teamId: query.team_id, q: query.q },
  );
  const more = rows.length > page.limit;
  const pageRows = more ? rows.slice(0, page.limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return { data: await present(ctx, pageRows), next_cursor: more && last ? cursorAfter(`${last.joined_us}~${last.user_id}`) : null };
}

export async function get(ctx: RequestContext, userId: string): Promise<Member> {
  const row = await repo.findMember(ctx.db, ctx.orgId, userId);
  if (!row) throw notFound(WHAT, userId);
  return (await present(ctx, [row]))[0] as Member;
}

const lastOwner = () => new ApiError('last_owner', 'The organization must keep at least one active Owner; make someone else an Owner first.');
const ownersOnly = (what: string) => new ApiError('permission_escalation', `Only an Owner may ${what}.`);

/** Roles, status or both; everything checked and changed in one transaction, under the organization's lock. */
export async function update(ctx: RequestContext, userId: string, body: Update): Promise<Member> {
  if (body.status === 'suspended' && userId === ctx.user) {
    throw new ApiError('invalid_transition', 'You cannot suspend yourself; another member with member:manage can.');
  }
  await ctx.write(async (w) => {
    await repo.lockOrganization(w.db, ctx.orgId);
    const current = await repo.findMember(w.db, ctx.orgId, userId);
    if (!current) throw notFound(WHAT, userId);
    if (current.status === 'removed') {
      throw new ApiError('invalid_transition', `${userId} is no longer a member; invite them again instead.`);
    }
    const held = (await repo.rolesOf(w.db, ctx.orgId, [userId])).get(userId) ?? [];
    const heldIds = held.map((r) => r.id);
    const wasOwner = held.some((r) => r.system_key === 'owner');
    const callerIsOwner = await repo.holdsOwner(w.db, ctx.orgId, ctx.user);
    let nextIds = heldIds;
    let rolesChanged = false;
    let nextRoles: readonly { seat_class: string }[] = held;

    if (body.role_ids !== undefined) {
      const found = await rolesIn(w.db, ctx.orgId, body.role_ids);
      const byId = new Map(found.map((r) => [r.id, r]));
      const unknown = body.role_ids.flatMap((id, i): ValidationProblem[] =>
        byId.has(id) ? [] : [{ in: 'body', pointer: `/role_ids/${i}`, message: 'names no role of this organization' }],
      );
      if (unknown.length > 0) throw new ApiError('unknown_reference', 'A role named is not a role of this organization.', { errors: unknown });
      const added = found.filter((r) => !heldIds.includes(r.id));
      const taken = held.filter((r) => !byId.has(r.id));
      if ((added.some((r) => r.system_key === 'owner') || taken.some((r) => r.system_key === 'owner')) && !callerIsOwner)
        throw ownersOnly('give or take the Owner role');
      requireHeld(
        ctx,
        added.flatMap((r) => permissionsOf(r)),
        'give a role',
      );
      // Taking a role away is bounded like giving it: else a holder of member:manage could
      // strip an Admin of Admin and so take over what it could never have granted.
      requireHeld(
        ctx,
        taken.flatMap((r) => permissionsOf(r)),
        'take away a role',
      );
      nextRoles = found;
      nextIds = found.map((r) => r.id).sort();
      rolesChanged = added.length > 0 || taken.length > 0;
      if (rolesChanged) await repo.replaceRoles(w.db, ctx.orgId, userId, nextIds);
    }

    const nextStatus = body.status ?? current.status;
    const statusChanged = nextStatus !== current.status;
    if (statusChanged) {
      if (wasOwner && !callerIsOwner) throw ownersOnly(nextStatus === 'suspended' ? 'suspend an Owner' : 'reactivate an Owner');
      // Suspending takes away everything the member holds, reactivating gives it back: both
      // are bounded like giving their roles.
      requireHeld(ctx, heldPermissionsOf(held), nextStatus === 'suspended' ? 'suspend a member' : 'reactivate a member');
      await repo.setStatus(w.db, ctx.orgId, userId, nextStatus, nextStatus === 'suspended' ? 'suspended' : null);
    }

    // An active member holding a billable role takes a seat (a suspended one does not):
    // becoming one, by a billable role given or by reactivation, needs a free seat.
    const seated = (status: string, roles: readonly { seat_class: string }[]) => status === 'active' && roles.some((r) => r.seat_class === 'billable');
    if (!seated(current.status, held) && seated(nextStatus, nextRoles)) {
      await requireWithinLimit(w.db, ctx.orgId, 'seats', () => seatsInUse(w.db, ctx.orgId, { exceptUserId: userId }));
    }

    // An active Owner stops being one (demoted or suspended): another must remain.
    const isOwner = rolesChanged ? (await rolesIn(w.db, ctx.orgId, nextIds)).some((r) => r.system_key === 'owner') : wasOwner;
    if (wasOwner && current.status === 'active' && (!isOwner || nextStatus !== 'active') && (await repo.otherActiveOwners(w.db, ctx.orgId, userId)) === 0) {
      throw lastOwner();
    }

    const changes: Record<string, unknown> = {};
    if (rolesChanged) changes.role_ids = { from: [...heldIds].sort(), to: nextIds };
    if (statusChanged) changes.status = { from: current.status, to: nextStatus };
    w.audit({ targetId: userId, changes });
    if (rolesChanged) w.emit('member.roles_updated', { member: eventMember(current), role_ids: nextIds, previous_role_ids: [...heldIds].sort() });
    if (statusChanged && nextStatus === 'suspended') w.emit('member.removed', { member: eventMember(current), status: 'suspended' });
  });
  return get(ctx, userId);
}

/**
 * Ends a membership: a member leaving, or someone with `member:manage` removing another. The
 * membership stays, `removed`, for the record; what the member held here goes (see hooks.ts).
 */
export async function remove(ctx: RequestContext, userId: string): Promise<void> {
  const self = userId === ctx.user;
  if (!self && !ctx.org?.permissions.has('member:manage')) {
    throw new ApiError('missing_permission', 'Removing another member needs the permission member:manage; anyone may leave by removing themselves.');
  }
  await ctx.write(async (w: WriteScope) => {
    await repo.lockOrganization(w.db, ctx.orgId);
    const current = await repo.findMember(w.db, ctx.orgId, userId);
    if (!current || current.status === 'removed') throw notFound(WHAT, userId);
    const isOwner = await repo.holdsOwner(w.db, ctx.orgId, userId);
    if (isOwner && !self && !(await repo.holdsOwner(w.db, ctx.orgId, ctx.user))) throw ownersOnly('remove an Owner');
    if (isOwner && current.status === 'active' && (await repo.otherActiveOwners(w.db, ctx.orgId, userId)) === 0) throw lastOwner();
    const roles = (await repo.rolesOf(w.db, ctx.orgId, [userId])).get(userId) ?? [];
    // Removing someone takes away all they hold: bounded like giving their roles (leaving is not).
    if (!self) requireHeld(ctx, heldPermissionsOf(roles), 'remove a member');
    const reason = self ? 'left' : 'removed';
    await repo.setStatus(w.db, ctx.orgId, userId, 'removed', reason);
    const { revokedTokens } = await repo.stripMembership(w.db, ctx.orgId, userId, new Date());
    await ctx.deps.hooks.run('memberRemoved', w, ctx.orgId, userId);
    w.audit({
      targetId: userId,
      changes: { status: { from: current.status, to: 'removed' }, status_reason: reason, role_ids: roles.map((r) => r.id), api_tokens_revoked: revokedTokens },
    });
    w.emit('member.removed', { member: eventMember(current), status: 'removed' });
  });
}
