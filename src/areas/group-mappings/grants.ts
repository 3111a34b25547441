import type { Executor } from '../../db/database';
import type { WriteScope } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { Hooks } from '../../http/hooks';

/**
 * Brings the roles and teams that group mappings give in line with who is in which SCIM group,
 * for some people of an organization. What a mapping gave is marked `via_mapping`; only such
 * grants are ever withdrawn, and only when no mapping still gives them, so a role or team given
 * directly (or before a mapping gave it too) stays. A suspended member keeps what the groups
 * give (suspension takes effect through the membership); a removed one has nothing.
 * Withdrawing the Owner role from the last active Owner is refused (409 last_owner).
 */
export async function reconcileMappedGrants(w: WriteScope, hooks: Hooks, orgId: string, userIds: readonly string[]): Promise<void> {
  const people = [...new Set(userIds)];
  if (people.length === 0) return;
  const db = w.db;
  const wanted = await db
    .selectFrom('scim_group_members as gm')
    .innerJoin('group_mappings as gmap', 'gmap.scim_group_id', 'gm.group_id')
    .innerJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 'gm.org_id').onRef('m.user_id', '=', 'gm.user_id'))
    .select(['gm.user_id', 'gmap.role_id', 'gmap.team_id'])
    .where('gm.org_id', '=', orgId)
    .where('gm.user_id', 'in', people)
    .where('m.status', '!=', 'removed')
    .execute();
  const roles = await db
    .selectFrom('role_assignments as ra')
    .innerJoin('roles as r', 'r.id', 'ra.role_id')
    .select(['ra.user_id', 'ra.role_id', 'ra.via_mapping', 'r.system_key'])
    .where('ra.org_id', '=', orgId)
    .where('ra.user_id', 'in', people)
    .execute();
  const teams = await db
    .selectFrom('team_members')
    .select(['user_id', 'team_id', 'via_mapping'])
    .where('org_id', '=', orgId)
    .where('user_id', 'in', people)
    .execute();
  const live = new Set(
    (
      await db.selectFrom('memberships').select('user_id').where('org_id', '=', orgId).where('user_id', 'in', people).where('status', '!=', 'removed').execute()
    ).map((m) => m.user_id),
  );

  const teamsChanged: string[] = [];
  for (const userId of people) {
    if (!live.has(userId)) continue;
    const wantRoles = new Set(wanted.filter((g) => g.user_id === userId && g.role_id).map((g) => g.role_id as string));
    const wantTeams = new Set(wanted.filter((g) => g.user_id === userId && g.team_id).map((g) => g.team_id as string));
    const heldRoles = roles.filter((r) => r.user_id === userId);
    const heldTeams = teams.filter((t) => t.user_id === userId);

    const addRoles = [...wantRoles].filter((id) => !heldRoles.some((r) => r.role_id === id));
    const dropRoles = heldRoles.filter((r) => r.via_mapping && !wantRoles.has(r.role_id));
    if (dropRoles.some((r) => r.system_key === 'owner')) await keepAnOwner(db, orgId, userId);
    if (addRoles.length > 0) {
      await db
        .insertInto('role_assignments')
        .values(addRoles.map((roleId) => ({ org_id: orgId, user_id: userId, role_id: roleId, via_mapping: true })))
        .execute();
    }
    if (dropRoles.length > 0) {
      await db
        .deleteFrom('role_assignments')
        .where('org_id', '=', orgId)
        .where('user_id', '=', userId)
        .where(
          'role_id',
          'in',
          dropRoles.map((r) => r.role_id),
        )
        .where('via_mapping', '=', true)
        .execute();
    }
    if (addRoles.length > 0 || dropRoles.length > 0) {
      await db.updateTable('memberships').set({ updated_at: new Date() }).where('org_id', '=', orgId).where('user_id', '=', userId).execute();
      const previous = heldRoles.map((r) => r.role_id).sort();
      const next = [...previous.filter((id) => !dropRoles.some((r) => r.role_id === id)), ...addRoles].sort();
      const user = await db.selectFrom('users').select(['id', 'email', 'name']).where('id', '=', userId).executeTakeFirstOrThrow();
      w.emit('member.roles_updated', { member: { user_id: user.id, email: user.email, name: user.name }, role_ids: next, previous_role_ids: previous });
    }

    const addTeams = [...wantTeams].filter((id) => !heldTeams.some((t) => t.team_id === id));
    const dropTeams = heldTeams.filter((t) => t.via_mapping && !wantTeams.has(t.team_id)).map((t) => t.team_id);
    if (addTeams.length > 0) {
      await db
        .insertInto('team_members')
        .values(addTeams.map((teamId) => ({ team_id: teamId, org_id: orgId, user_id: userId, via_mapping: true })))
        .execute();
    }
    if (dropTeams.length > 0) {
      await db
        .deleteFrom('team_members')
        .where('org_id', '=', orgId)
        .where('user_id', '=', userId)
        .where('team_id', 'in', dropTeams)
        .where('via_mapping', '=', true)
        .execute();
    }
    if (addTeams.length > 0 || dropTeams.length > 0) teamsChanged.push(userId);
  }
  if (teamsChanged.length > 0) await hooks.run('teamMembershipChanged', w, orgId, teamsChanged);
}

async function keepAnOwner(db: Executor, orgId: string, userId: string): Promise<void> {
  const self = await db.selectFrom('memberships').select('status').where('org_id', '=', orgId).where('user_id', '=', userId).executeTakeFirst();
  if (self?.status !== 'active') return;
  const others = await db
    .selectFrom('role_assignments as ra')
    .innerJoin('roles as r', 'r.id', 'ra.role_id')
    .innerJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 'ra.org_id').onRef('m.user_id', '=', 'ra.user_id'))
    .select('ra.user_id')
    .where('ra.org_id', '=', orgId)
    .where('r.system_key', '=', 'owner')
    .where('m.status', '=', 'active')
    .where('ra.user_id', '!=', userId)
    .executeTakeFirst();
  if (!others)
    throw new ApiError('last_owner', 'The organization must keep at least one active Owner; this change would take the Owner role from the last one.');
}
