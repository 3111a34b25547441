import { sql } from 'kysely';
import type { Db } from '../../db/database';

export function findUserProfile(db: Db, userId: string) {
  return db
    .selectFrom('users as u')
    .select([
      'u.id',
      'u.email',
      'u.name',
      'u.avatar_url',
      'u.created_at',
      'u.updated_at',
      'u.is_root_org_staff',
      'u.totp_enabled_at',
      sql<number>`(select count(*)::int from passkeys p where p.user_id = u.id)`.as('passkey_count'),
    ])
    .where('u.id', '=', userId)
    .executeTakeFirst();
}

/** Active memberships with their organizations, in organization id order. */
export function listActiveMemberships(db: Db, userId: string, onlyOrgId?: string) {
  return db
    .selectFrom('memberships as m')
    .innerJoin('organizations as o', 'o.id', 'm.org_id')
    .select([
      'o.id',
      'o.name',
      'o.slug',
      'o.logo_url',
      'o.require_mfa',
      'o.plan',
      'o.created_at',
      'o.updated_at',
      'm.user_id',
      'm.status',
      'm.via',
      'm.joined_at',
    ])
    .where('m.user_id', '=', userId)
    .where('m.status', '=', 'active')
    .$if(onlyOrgId !== undefined, (q) => q.where('m.org_id', '=', onlyOrgId as string))
    .orderBy('o.id')
    .execute();
}

export function listRolesHeld(db: Db, userId: string, orgIds: string[]) {
  if (orgIds.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('role_assignments as ra')
    .innerJoin('roles as r', 'r.id', 'ra.role_id')
    .select(['ra.org_id', 'r.id', 'r.name', 'r.is_system', 'r.seat_class', 'r.system_key', 'r.permissions'])
    .where('ra.user_id', '=', userId)
    .where('ra.org_id', 'in', orgIds)
    .orderBy('r.id')
    .execute();
}

export function listTeamsJoined(db: Db, userId: string, orgIds: string[]) {
  if (orgIds.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('team_members as tm')
    .innerJoin('teams as t', 't.id', 'tm.team_id')
    .select(['tm.org_id', 't.id', 't.name'])
    .where('tm.user_id', '=', userId)
    .where('tm.org_id', 'in', orgIds)
    .orderBy('t.id')
    .execute();
}
