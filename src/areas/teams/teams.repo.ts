import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { MembershipStatus, NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';

export async function insertTeam(
  db: Executor,
  input: { orgId: string; name: string; description?: string | null; createdByUserId?: string | null },
): Promise<string> {
  const id = newId('team');
  await db
    .insertInto('teams')
    .values({ id, org_id: input.orgId, name: input.name, description: input.description ?? null, created_by_user_id: input.createdByUserId ?? null })
    .execute();
  return id;
}

export async function addTeamMember(db: Executor, input: { teamId: string; orgId: string; userId: string; addedByUserId?: string | null }): Promise<void> {
  await db
    .insertInto('team_members')
    .values({ team_id: input.teamId, org_id: input.orgId, user_id: input.userId, added_by_user_id: input.addedByUserId ?? null })
    .execute();
}

// ---------------------------------------------------------------------------------------
// The Teams operations
// ---------------------------------------------------------------------------------------

export const TEAM_COLUMNS = ['id', 'org_id', 'name', 'description', 'created_by_user_id', 'created_at', 'updated_at'] as const;
export type TeamRow = Pick<Row<'teams'>, (typeof TEAM_COLUMNS)[number]>;

/** Unique per organization without regard to case (migration 2026_11_26_060002). */
export const TEAM_NAME_CONSTRAINT = 'teams_org_id_lower_name_key';

export function listTeams(db: Executor, orgId: string, page: PageRequest, filter: { userId?: string }): Promise<TeamRow[]> {
  return db
    .selectFrom('teams')
    .select(TEAM_COLUMNS)
    .where('org_id', '=', orgId)
    .$if(filter.userId !== undefined, (q) =>
      q.where((eb) =>
        eb.exists(
          eb
            .selectFrom('team_members as tm')
            .select('tm.team_id')
            .whereRef('tm.team_id', '=', 'teams.id')
            .where('tm.user_id', '=', filter.userId as string),
        ),
      ),
    )
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findTeam(db: Executor, orgId: string, id: string, forUpdate = false): Promise<TeamRow | undefined> {
  return db
    .selectFrom('teams')
    .select(TEAM_COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

export function insertTeamRow(db: Executor, values: NewRow<'teams'>): Promise<TeamRow> {
  return db.insertInto('teams').values(values).returning(TEAM_COLUMNS).executeTakeFirstOrThrow();
}

export function updateTeam(db: Executor, orgId: string, id: string, changes: RowChanges<'teams'>): Promise<TeamRow | undefined> {
  return db.updateTable('teams').set(changes).where('org_id', '=', orgId).where('id', '=', id).returning(TEAM_COLUMNS).executeTakeFirst();
}

/** Deletes the team, its memberships (cascade) and the shares granted to it. */
export async function deleteTeam(db: Executor, orgId: string, id: string): Promise<TeamRow | undefined> {
  await db.deleteFrom('shares').where('org_id', '=', orgId).where('principal_type', '=', 'team').where('principal_id', '=', id).execute();
  return db.deleteFrom('teams').where('org_id', '=', orgId).where('id', '=', id).returning(TEAM_COLUMNS).executeTakeFirst();
}

/** How many members each team has (active or suspended: removed members leave their teams). */
export async function teamMemberCounts(db: Executor, orgId: string, teamIds: readonly string[]): Promise<Map<string, number>> {
  const counts = new Map<string, number>(teamIds.map((id) => [id, 0]));
  if (teamIds.length === 0) return counts;
  const rows = await db
    .selectFrom('team_members')
    .select(['team_id', (eb) => eb.fn.countAll<string>().as('n')])
    .where('org_id', '=', orgId)
    .where('team_id', 'in', [...teamIds])
    .groupBy('team_id')
    .execute();
  for (const row of rows) counts.set(row.team_id, Number(row.n));
  return counts;
}

export interface TeamMemberRow {
  team_id: string;
  user_id: string;
  email: string;
  name: string | null;
  avatar_url: string | null;
  member_status: MembershipStatus;
  added_at: Date;
  added_by_user_id: string | null;
  /** added_at in microseconds since the epoch, exactly: the list's keyset. */
  added_us: string;
}

function teamMembersQuery(db: Executor, orgId: string, teamId: string) {
  return db
    .selectFrom('team_members as tm')
    .innerJoin('users as u', 'u.id', 'tm.user_id')
    .innerJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 'tm.org_id').onRef('m.user_id', '=', 'tm.user_id'))
    .select([
      'tm.team_id',
      'tm.user_id',
      'u.email',
      'u.name',
      'u.avatar_url',
      'm.status as member_status',
      'tm.added_at',
      'tm.added_by_user_id',
      sql<string>`(extract(epoch from tm.added_at) * 1000000)::bigint::text`.as('added_us'),
    ])
    .where('tm.org_id', '=', orgId)
    .where('tm.team_id', '=', teamId);
}

export function listTeamMembers(
  db: Executor,
  orgId: string,
  teamId: string,
  page: { limit: number; after?: { addedUs: string; userId: string } },
): Promise<TeamMemberRow[]> {
  const after = page.after;
  return teamMembersQuery(db, orgId, teamId)
    .$if(after !== undefined, (q) =>
      q.where(sql<boolean>`(tm.added_at, tm.user_id) > (timestamptz 'epoch' + ${after?.addedUs}::bigint * interval '1 microsecond', ${after?.userId})`),
    )
    .orderBy('tm.added_at')
    .orderBy('tm.user_id')
    .limit(page.limit + 1)
    .execute();
}

export function findTeamMember(db: Executor, orgId: string, teamId: string, userId: string): Promise<TeamMemberRow | undefined> {
  return teamMembersQuery(db, orgId, teamId).where('tm.user_id', '=', userId).executeTakeFirst();
}

/** Whether the person is in the team only because a group mapping put them there. */
export async function heldByMappingOnly(db: Executor, teamId: string, userId: string): Promise<boolean> {
  const row = await db.selectFrom('team_members').select('via_mapping').where('team_id', '=', teamId).where('user_id', '=', userId).executeTakeFirst();
  return row?.via_mapping === true;
}

/**
 * Adds the member unless already there; true when added. One a group mapping put there becomes
 * a direct member (true too): removing the mapping later must not take away what a person added.
 */
export async function insertTeamMember(db: Executor, input: { teamId: string; orgId: string; userId: string; addedByUserId: string | null }): Promise<boolean> {
  const rows = await db
    .insertInto('team_members')
    .values({ team_id: input.teamId, org_id: input.orgId, user_id: input.userId, added_by_user_id: input.addedByUserId })
    .onConflict((oc) =>
      oc
        .columns(['team_id', 'user_id'])
        .doUpdateSet({ via_mapping: false, added_by_user_id: input.addedByUserId })
        .where('team_members.via_mapping', '=', true),
    )
    .returning('user_id')
    .execute();
  return rows.length > 0;
}

export async function deleteTeamMember(db: Executor, orgId: string, teamId: string, userId: string): Promise<boolean> {
  const rows = await db
    .deleteFrom('team_members')
    .where('org_id', '=', orgId)
    .where('team_id', '=', teamId)
    .where('user_id', '=', userId)
    .returning('user_id')
    .execute();
  return rows.length > 0;
}

/** Takes a person out of every team of the organization; returns the teams they were in. */
export async function leaveAllTeams(db: Executor, orgId: string, userId: string): Promise<string[]> {
  const rows = await db.deleteFrom('team_members').where('org_id', '=', orgId).where('user_id', '=', userId).returning('team_id').execute();
  return rows.map((r) => r.team_id);
}

/** Whether the person is a member (active or suspended) of the organization. */
export async function isMember(db: Executor, orgId: string, userId: string): Promise<boolean> {
  const row = await db
    .selectFrom('memberships')
    .select('user_id')
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .where('status', 'in', ['active', 'suspended'])
    .executeTakeFirst();
  return !!row;
}
