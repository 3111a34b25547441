import type { components } from '../../../generated/openapi';
import { changedMembers, type RequestContext, type WriteScope } from '../../http/context';
import { ApiError, conflictOnUnique, notFound } from '../../http/errors';
import { cursorAfter, keyedPageRequest, toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { restrictionsNaming } from '../restrictions';
import * as repo from './teams.repo';

type Team = components['schemas']['Team'];
type TeamMember = components['schemas']['TeamMember'];
type Create = components['schemas']['TeamCreate'];
type Update = components['schemas']['TeamUpdate'];

const WHAT = 'team';

function toTeam(row: repo.TeamRow, memberCount: number): Team {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    member_count: memberCount,
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

function toTeamMember(row: repo.TeamMemberRow): TeamMember {
  return {
    team_id: row.team_id,
    user: { id: row.user_id, email: row.email, name: row.name, avatar_url: row.avatar_url },
    member_status: row.member_status,
    added_at: row.added_at.toISOString(),
    added_by_user_id: row.added_by_user_id,
  };
}

const nameTaken = (name: string) =>
  new ApiError('name_taken', `A team of this organization is already named "${name}" (names are compared without regard to case).`);
const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined
    ? run()
    : conflictOnUnique(
        repo.TEAM_NAME_CONSTRAINT,
        () => nameTaken(name),
        () => conflictOnUnique('teams_org_id_name_key', () => nameTaken(name), run),
      );

async function withCount(ctx: RequestContext, row: repo.TeamRow): Promise<Team> {
  return toTeam(row, (await repo.teamMemberCounts(ctx.db, ctx.orgId, [row.id])).get(row.id) ?? 0);
}

export async function list(ctx: RequestContext, page: PageRequest, filter: { user_id?: string }): Promise<Page<Team>> {
  if (filter.user_id !== undefined && !(await repo.isMember(ctx.db, ctx.orgId, filter.user_id))) {
    throw new ApiError('unknown_reference', `${filter.user_id} is not a member of this organization.`, {
      errors: [{ in: 'query', pointer: '/user_id', message: 'names no member of this organization' }],
    });
  }
  const rows = await repo.listTeams(ctx.db, ctx.orgId, page, { userId: filter.user_id });
  const counts = await repo.teamMemberCounts(
    ctx.db,
    ctx.orgId,
    rows.slice(0, page.limit).map((r) => r.id),
  );
  return toPage(rows, page, (row) => toTeam(row, counts.get(row.id) ?? 0));
}

export async function get(ctx: RequestContext, id: string): Promise<Team> {
  const row = await repo.findTeam(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return withCount(ctx, row);
}

export async function create(ctx: RequestContext, body: Create): Promise<Team> {
  const row = await guardName(body.name, () =>
    ctx.write(async (w) => {
      const inserted = await repo.insertTeamRow(w.db, {
        id: newId('team'),
        org_id: ctx.orgId,
        name: body.name,
        description: body.description ?? null,
        created_by_user_id: ctx.user,
      });
      w.audit({ targetId: inserted.id, changes: { name: inserted.name, description: inserted.description } });
      return inserted;
    }),
  );
  return toTeam(row, 0);
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<Team> {
  const row = await guardName(body.name, () =>
    ctx.write(async (w) => {
      const current = await repo.findTeam(w.db, ctx.orgId, id, true);
      if (!current) throw notFound(WHAT, id);
      const changes: Parameters<typeof repo.updateTeam>[3] = {};
      const before: Record<string, unknown> = {};
      if (body.name !== undefined && body.name !== current.name) {
        changes.name = body.name;
        before.name = current.name;
      }
      if (body.description !== undefined && body.description !== current.description) {
        changes.description = body.description;
        before.description = current.description;
      }
      const updated = Object.keys(changes).length > 0 ? await repo.updateTeam(w.db, ctx.orgId, id, changes) : current;
      if (!updated) throw notFound(WHAT, id);
      w.audit({ targetId: id, changes: changedMembers(before, changes) });
      return updated;
    }),
  );
  return withCount(ctx, row);
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const current = await repo.findTeam(w.db, ctx.orgId, id, true);
    if (!current) throw notFound(WHAT, id);
    const used: string[] = [];
    const restrictions = await restrictionsNaming(w.db, ctx.orgId, { teamId: id });
    if (restrictions.length > 0) used.push(`${restrictions.length} restriction${restrictions.length === 1 ? '' : 's'} (${restrictions.join(', ')})`);
    used.push(...(await ctx.deps.hooks.usages('teamUsage', w.db, ctx.orgId, id)));
    if (used.length > 0) throw new ApiError('team_in_use', `${current.name} is still named by ${used.join(' and ')}; change those first.`);
    const members = (await repo.teamMemberCounts(w.db, ctx.orgId, [id])).get(id) ?? 0;
    const memberIds = await w.db.selectFrom('team_members').select('user_id').where('org_id', '=', ctx.orgId).where('team_id', '=', id).execute();
    await ctx.deps.hooks.run('teamDeleted', w, ctx.orgId, id);
    await repo.deleteTeam(w.db, ctx.orgId, id);
    await teamMembershipChanged(
      ctx,
      w,
      memberIds.map((m) => m.user_id),
    );
    w.audit({ targetId: id, changes: { name: current.name, description: current.description, member_count: members } });
  });
}

// The cursor carries the last entry's time of addition (microseconds) and user id: members are listed in the order they were added.
const KEY = /^(\d{1,16})~(usr_[0-7][0-9a-hjkmnp-tv-z]{25})$/;

export async function listMembers(ctx: RequestContext, id: string, query: { limit?: number; cursor?: string }): Promise<Page<TeamMember>> {
  const page = keyedPageRequest(query, (key) => KEY.test(key));
  if (!(await repo.findTeam(ctx.db, ctx.orgId, id))) throw notFound(WHAT, id);
  const match = page.after === undefined ? null : KEY.exec(page.after);
  const rows = await repo.listTeamMembers(ctx.db, ctx.orgId, id, {
    limit: page.limit,
    after: match ? { addedUs: match[1] as string, userId: match[2] as string } : undefined,
  });
  const more = rows.length > page.limit;
  const pageRows = more ? rows.slice(0, page.limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return { data: pageRows.map(toTeamMember), next_cursor: more && last ? cursorAfter(`${last.added_us}~${last.user_id}`) : null };
}

/** Thrown inside the write when the person turned out to be in the team already: nothing is recorded. */
class AlreadyThere extends Error {}

export async function addMember(ctx: RequestContext, id: string, userId: string): Promise<{ created: boolean; member: TeamMember }> {
  if (!(await repo.findTeam(ctx.db, ctx.orgId, id))) throw notFound(WHAT, id);
  if (!(await repo.isMember(ctx.db, ctx.orgId, userId))) {
    throw new ApiError('unknown_reference', `${userId} is not a member of this organization.`, {
      errors: [{ in: 'body', pointer: '/user_id', message: 'names no member of this organization' }],
    });
  }
  const existing = await repo.findTeamMember(ctx.db, ctx.orgId, id, userId);
  // Already there by a group mapping only: added by hand now, so the membership becomes direct
  // (a change, audited), and removing the mapping later leaves it.
  if (existing && !(await repo.heldByMappingOnly(ctx.db, id, userId))) {
    ctx.unchanged();
    return { created: false, member: toTeamMember(existing) };
  }
  try {
    await ctx.write(async (w) => {
      if (!(await repo.findTeam(w.db, ctx.orgId, id, true))) throw notFound(WHAT, id);
      if (!(await repo.insertTeamMember(w.db, { teamId: id, orgId: ctx.orgId, userId, addedByUserId: ctx.user }))) throw new AlreadyThere();
      await teamMembershipChanged(ctx, w, [userId]);
      w.audit({ targetId: id, changes: { user_id: userId } });
    });
  } catch (err) {
    if (!(err instanceof AlreadyThere)) throw err;
    const row = await repo.findTeamMember(ctx.db, ctx.orgId, id, userId);
    if (!row) throw err;
    ctx.unchanged();
    return { created: false, member: toTeamMember(row) };
  }
  const row = await repo.findTeamMember(ctx.db, ctx.orgId, id, userId);
  if (!row) throw notFound(WHAT, id);
  return { created: !existing, member: toTeamMember(row) };
}

export async function removeMember(ctx: RequestContext, id: string, userId: string): Promise<void> {
  await ctx.write(async (w) => {
    if (!(await repo.findTeam(w.db, ctx.orgId, id, true))) throw notFound(WHAT, id);
    if (!(await repo.deleteTeamMember(w.db, ctx.orgId, id, userId))) throw new ApiError('not_found', `${userId} is not in team ${id}.`);
    await teamMembershipChanged(ctx, w, [userId]);
    w.audit({ targetId: id, changes: { user_id: userId } });
  });
}

function teamMembershipChanged(ctx: RequestContext, w: WriteScope, userIds: readonly string[]): Promise<void> {
  return userIds.length === 0 ? Promise.resolve() : ctx.deps.hooks.run('teamMembershipChanged', w, ctx.orgId, userIds);
}

/** A removed member leaves every team (the memberRemoved hook). */
export async function onMemberRemoved(w: WriteScope, orgId: string, userId: string): Promise<void> {
  await repo.leaveAllTeams(w.db, orgId, userId);
}
