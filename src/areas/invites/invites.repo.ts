import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

const COLUMNS = [
  'id',
  'org_id',
  'email',
  'status',
  'message',
  'invited_by_user_id',
  'expires_at',
  'accepted_at',
  'accepted_by_user_id',
  'revoked_at',
  'revoked_by_user_id',
  'last_sent_at',
  'send_count',
  'created_at',
  'updated_at',
] as const;

export type InviteRow = Pick<Row<'invites'>, (typeof COLUMNS)[number]>;
export type ListedStatus = 'pending' | 'accepted' | 'revoked' | 'expired';

/** `expired` is a pending invite past its expiry; `pending` one before it. */
export function listInvites(db: Executor, orgId: string, page: PageRequest, filter: { status?: ListedStatus; email?: string }, now: Date) {
  const { status, email } = filter;
  return db
    .selectFrom('invites')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(status === 'expired', (q) => q.where('status', '=', 'pending').where('expires_at', '<=', now))
    .$if(status === 'pending', (q) => q.where('status', '=', 'pending').where('expires_at', '>', now))
    .$if(status === 'accepted' || status === 'revoked', (q) => q.where('status', '=', status as 'accepted'))
    .$if(email !== undefined, (q) => q.where('email', '=', (email as string).toLowerCase()))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findInvite(db: Executor, orgId: string, id: string, forUpdate = false) {
  return db
    .selectFrom('invites')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

export function findInviteByTokenHash(db: Executor, tokenHash: string) {
  return db.selectFrom('invites').select(COLUMNS).where('token_hash', '=', tokenHash).forUpdate().executeTakeFirst();
}

export function insertInvite(db: Executor, values: NewRow<'invites'>) {
  return db.insertInto('invites').values(values).returning(COLUMNS).executeTakeFirstOrThrow();
}

export async function insertGrants(db: Executor, inviteId: string, roleIds: readonly string[], teamIds: readonly string[]): Promise<void> {
  if (roleIds.length > 0)
    await db
      .insertInto('invite_roles')
      .values(roleIds.map((role_id) => ({ invite_id: inviteId, role_id })))
      .execute();
  if (teamIds.length > 0)
    await db
      .insertInto('invite_teams')
      .values(teamIds.map((team_id) => ({ invite_id: inviteId, team_id })))
      .execute();
}

export function updateInvite(db: Executor, orgId: string, id: string, changes: RowChanges<'invites'>) {
  return db.updateTable('invites').set(changes).where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

/**
 * Takes the invite's turn to be emailed again: a new token, a renewed expiry, unless it was
 * sent less than `intervalMs` ago. Conditional, so that concurrent resends (on any replica)
 * send one email. Undefined: no such invite, or not its turn.
 */
export function claimResend(db: Executor, orgId: string, id: string, input: { tokenHash: string; now: Date; expiresAt: Date; intervalMs: number }) {
  return db
    .updateTable('invites')
    .set((eb) => ({ token_hash: input.tokenHash, expires_at: input.expiresAt, last_sent_at: input.now, send_count: eb('send_count', '+', 1) }))
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .where('last_sent_at', '<=', new Date(input.now.getTime() - input.intervalMs))
    .returning(COLUMNS)
    .executeTakeFirst();
}

export interface RoleFacts {
  id: string;
  name: string;
  is_system: boolean;
  system_key: string | null;
  seat_class: 'billable' | 'free_admin';
  permissions: string[];
}

/** The roles of the organization among `ids`. */
export function orgRoles(db: Executor, orgId: string, ids: readonly string[]): Promise<RoleFacts[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('roles')
    .select(['id', 'name', 'is_system', 'system_key', 'seat_class', 'permissions'])
    .where('org_id', '=', orgId)
    .where('id', 'in', [...ids])
    .execute();
}

export function orgTeams(db: Executor, orgId: string, ids: readonly string[]) {
  if (ids.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('teams')
    .select(['id', 'name'])
    .where('org_id', '=', orgId)
    .where('id', 'in', [...ids])
    .execute();
}

/** The roles and teams each invite grants, by invite id, in id order. */
export async function grantsOf(db: Executor, inviteIds: readonly string[]) {
  const roles = new Map<string, RoleFacts[]>();
  const teams = new Map<string, { id: string; name: string }[]>();
  if (inviteIds.length === 0) return { roles, teams };
  const [roleRows, teamRows] = await Promise.all([
    db
      .selectFrom('invite_roles as ir')
      .innerJoin('roles as r', 'r.id', 'ir.role_id')
      .select(['ir.invite_id', 'r.id', 'r.name', 'r.is_system', 'r.system_key', 'r.seat_class', 'r.permissions'])
      .where('ir.invite_id', 'in', [...inviteIds])
      .orderBy('r.id')
      .execute(),
    db
      .selectFrom('invite_teams as it')
      .innerJoin('teams as t', 't.id', 'it.team_id')
      .select(['it.invite_id', 't.id', 't.name'])
      .where('it.invite_id', 'in', [...inviteIds])
      .orderBy('t.id')
      .execute(),
  ]);
  for (const { invite_id, ...role } of roleRows) roles.set(invite_id, [...(roles.get(invite_id) ?? []), role]);
  for (const { invite_id, ...team } of teamRows) teams.set(invite_id, [...(teams.get(invite_id) ?? []), team]);
  return { roles, teams };
}

/** The membership status of the person with this email in the organization, if any. */
export async function membershipOfEmail(db: Executor, orgId: string, email: string) {
  return db
    .selectFrom('memberships as m')
    .innerJoin('users as u', 'u.id', 'm.user_id')
    .select(['m.user_id', 'm.status'])
    .where('m.org_id', '=', orgId)
    .where((eb) => eb(eb.fn('lower', ['u.email']), '=', email.toLowerCase()))
    .executeTakeFirst();
}

export function organizationName(db: Executor, orgId: string) {
  return db.selectFrom('organizations').select(['name', 'slug']).where('id', '=', orgId).executeTakeFirst();
}

export function userFacts(db: Executor, userId: string) {
  return db.selectFrom('users').select(['id', 'email', 'name']).where('id', '=', userId).executeTakeFirst();
}

/** Pending, unexpired invites that would grant the role. */
export async function pendingInvitesNamingRole(db: Executor, orgId: string, roleId: string, now: Date): Promise<number> {
  const row = await db
    .selectFrom('invites as i')
    .innerJoin('invite_roles as ir', 'ir.invite_id', 'i.id')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('i.org_id', '=', orgId)
    .where('i.status', '=', 'pending')
    .where('i.expires_at', '>', now)
    .where('ir.role_id', '=', roleId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
