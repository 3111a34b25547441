import type { Executor } from '../../db/database';
import { sql } from 'kysely';
import type { MembershipStatus, MembershipVia, Row, SystemRoleKey } from '../../db/schema';

/** Makes a person a member of an organization, holding the given roles. */
export async function addMember(
  db: Executor,
  input: { orgId: string; userId: string; status?: MembershipStatus; via: MembershipVia; roleIds?: readonly string[] },
): Promise<void> {
  await db
    .insertInto('memberships')
    .values({ org_id: input.orgId, user_id: input.userId, status: input.status ?? 'active', via: input.via })
    .execute();
  if (input.roleIds && input.roleIds.length > 0) {
    await db
      .insertInto('role_assignments')
      .values(input.roleIds.map((roleId) => ({ org_id: input.orgId, user_id: input.userId, role_id: roleId })))
      .execute();
  }
}

// ---------------------------------------------------------------------------------------
// The Members operations
// ---------------------------------------------------------------------------------------

export interface MemberRow {
  user_id: string;
  status: MembershipStatus;
  status_reason: Row<'memberships'>['status_reason'];
  via: MembershipVia | null;
  joined_at: Date;
  updated_at: Date;
  /** joined_at in microseconds since the epoch, exactly: the list's keyset. */
  joined_us: string;
  email: string;
  name: string | null;
  avatar_url: string | null;
  has_second_factor: boolean;
}

/** Where a page of members starts: after (joined_at, user_id) of the previous page's last. */
export interface MemberKey {
  joinedUs: string;
  userId: string;
}

export interface MemberFilter {
  status?: MembershipStatus;
  roleId?: string;
  teamId?: string;
  q?: string;
}

function membersQuery(db: Executor, orgId: string) {
  return db
    .selectFrom('memberships as m')
    .innerJoin('users as u', 'u.id', 'm.user_id')
    .select([
      'm.user_id',
      'm.status',
      'm.status_reason',
      'm.via',
      'm.joined_at',
      'm.updated_at',
      'u.email',
      'u.name',
      'u.avatar_url',
      sql<string>`(extract(epoch from m.joined_at) * 1000000)::bigint::text`.as('joined_us'),
      sql<boolean>`(u.totp_enabled_at is not null or exists (select 1 from passkeys p where p.user_id = u.id))`.as('has_second_factor'),
    ])
    .where('m.org_id', '=', orgId);
}

const likePattern = (q: string) => `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

export function listMembers(db: Executor, orgId: string, page: { limit: number; after?: MemberKey }, filter: MemberFilter): Promise<MemberRow[]> {
  const after = page.after;
  return membersQuery(db, orgId)
    .$if(filter.status === undefined, (q) => q.where('m.status', 'in', ['active', 'suspended']))
    .$if(filter.status !== undefined, (q) => q.where('m.status', '=', filter.status as MembershipStatus))
    .$if(filter.roleId !== undefined, (q) =>
      q.where((eb) =>
        eb.exists(
          eb
            .selectFrom('role_assignments as ra')
            .select('ra.role_id')
            .whereRef('ra.org_id', '=', 'm.org_id')
            .whereRef('ra.user_id', '=', 'm.user_id')
            .where('ra.role_id', '=', filter.roleId as string),
        ),
      ),
    )
    .$if(filter.teamId !== undefined, (q) =>
      q.where((eb) =>
        eb.exists(
          eb
            .selectFrom('team_members as tm')
            .select('tm.team_id')
            .whereRef('tm.org_id', '=', 'm.org_id')
            .whereRef('tm.user_id', '=', 'm.user_id')
            .where('tm.team_id', '=', filter.teamId as string),
        ),
      ),
    )
    .$if(filter.q !== undefined, (q) =>
      q.where((eb) => eb.or([eb('u.email', 'ilike', likePattern(filter.q as string)), eb('u.name', 'ilike', likePattern(filter.q as string))])),
    )
    .$if(after !== undefined, (q) =>
      q.where(sql<boolean>`(m.joined_at, m.user_id) > (timestamptz 'epoch' + ${after?.joinedUs}::bigint * interval '1 microsecond', ${after?.userId})`),
    )
    .orderBy('m.joined_at')
    .orderBy('m.user_id')
    .limit(page.limit + 1)
    .execute() as Promise<MemberRow[]>;
}

export function findMember(db: Executor, orgId: string, userId: string): Promise<MemberRow | undefined> {
  return membersQuery(db, orgId).where('m.user_id', '=', userId).executeTakeFirst() as Promise<MemberRow | undefined>;
}

/** Locks the membership row for a change (and tells whether it exists). */
export async function lockMembership(db: Executor, orgId: string, userId: string): Promise<MembershipStatus | undefined> {
  const row = await db.selectFrom('memberships').select('status').where('org_id', '=', orgId).where('user_id', '=', userId).forUpdate().executeTakeFirst();
  return row?.status;
}

/**
 * Serializes the changes that must keep an organization's invariants (an active Owner, the
 * seat limit): two concurrent demotions of the last two Owners cannot both pass.
 */
export async function lockOrganization(db: Executor, orgId: string): Promise<void> {
  await db.selectFrom('organizations').select('id').where('id', '=', orgId).forUpdate().executeTakeFirst();
}

export interface HeldRole {
  user_id: string;
  id: string;
  name: string;
  is_system: boolean;
  system_key: SystemRoleKey | null;
  seat_class: 'billable' | 'free_admin';
  permissions: string[];
}

/** The roles each of the members holds, oldest role first. */
export async function rolesOf(db: Executor, orgId: string, userIds: readonly string[]): Promise<Map<string, HeldRole[]>> {
  const result = new Map<string, HeldRole[]>(userIds.map((id) => [id, []]));
  if (userIds.length === 0) return result;
  const rows = await db
    .selectFrom('role_assignments as ra')
    .innerJoin('roles as r', 'r.id', 'ra.role_id')
    .select(['ra.user_id', 'r.id', 'r.name', 'r.is_system', 'r.system_key', 'r.seat_class', 'r.permissions'])
    .where('ra.org_id', '=', orgId)
    .where('ra.user_id', 'in', [...userIds])
    .orderBy('r.id')
    .execute();
  for (const row of rows) result.get(row.user_id)?.push(row);
  return result;
}

/** The teams each of the members is in, by name. */
export async function teamsOf(db: Executor, orgId: string, userIds: readonly string[]): Promise<Map<string, { id: string; name: string }[]>> {
  const result = new Map<string, { id: string; name: string }[]>(userIds.map((id) => [id, []]));
  if (userIds.length === 0) return result;
  const rows = await db
    .selectFrom('team_members as tm')
    .innerJoin('teams as t', 't.id', 'tm.team_id')
    .select(['tm.user_id', 't.id', 't.name'])
    .where('tm.org_id', '=', orgId)
    .where('tm.user_id', 'in', [...userIds])
    .orderBy('t.name')
    .orderBy('t.id')
    .execute();
  for (const row of rows) result.get(row.user_id)?.push({ id: row.id, name: row.name });
  return result;
}

export async function replaceRoles(db: Executor, orgId: string, userId: string, roleIds: readonly string[]): Promise<void> {
  await db
    .deleteFrom('role_assignments')
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .where('role_id', 'not in', [...roleIds])
    .execute();
  await db
    .insertInto('role_assignments')
    .values(roleIds.map((roleId) => ({ org_id: orgId, user_id: userId, role_id: roleId })))
    .onConflict((oc) => oc.columns(['org_id', 'user_id', 'role_id']).doNothing())
    .execute();
  // Member.updated_at is when the membership (status, roles) last changed: the roles live beside it.
  await db.updateTable('memberships').set({ updated_at: new Date() }).where('org_id', '=', orgId).where('user_id', '=', userId).execute();
}

export type StatusReason = Row<'memberships'>['status_reason'];

export async function setStatus(db: Executor, orgId: string, userId: string, status: MembershipStatus, reason: StatusReason): Promise<void> {
  await db.updateTable('memberships').set({ status, status_reason: reason }).where('org_id', '=', orgId).where('user_id', '=', userId).execute();
}

/** Active members holding the Owner role, other than `except`. */
export async function otherActiveOwners(db: Executor, orgId: string, except: string): Promise<number> {
  const row = await db
    .selectFrom('role_assignments as ra')
    .innerJoin('roles as r', 'r.id', 'ra.role_id')
    .innerJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 'ra.org_id').onRef('m.user_id', '=', 'ra.user_id'))
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('ra.org_id', '=', orgId)
    .where('r.system_key', '=', 'owner')
    .where('m.status', '=', 'active')
    .where('ra.user_id', '!=', except)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Whether the person holds the Owner role here. */
export async function holdsOwner(db: Executor, orgId: string, userId: string): Promise<boolean> {
  const row = await db
    .selectFrom('role_assignments as ra')
    .innerJoin('roles as r', 'r.id', 'ra.role_id')
    .select('r.id')
    .where('ra.org_id', '=', orgId)
    .where('ra.user_id', '=', userId)
    .where('r.system_key', '=', 'owner')
    .executeTakeFirst();
  return !!row;
}

/** What a removed member no longer holds here: roles, shares made to them, their API tokens (revoked at once). */
export async function stripMembership(db: Executor, orgId: string, userId: string, at: Date): Promise<{ revokedTokens: number }> {
  await db.deleteFrom('role_assignments').where('org_id', '=', orgId).where('user_id', '=', userId).execute();
  await db.deleteFrom('shares').where('org_id', '=', orgId).where('principal_type', '=', 'user').where('principal_id', '=', userId).execute();
  const revoked = await db
    .updateTable('api_tokens')
    .set({ revoked_at: at })
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .returning('id')
    .execute();
  return { revokedTokens: revoked.length };
}
