import type { components } from '../../../generated/openapi';
import { requireWithinLimit } from '../../access/entitlements';
import { seatsInUse } from '../../access/seats';
import { rolePermissions } from '../../identity/permissions';
import type { Db, Executor } from '../../db/database';
import { appendEvents } from '../../events/outbox';
import type { RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, type ValidationProblem } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { hashSecret, randomSecret } from '../../lib/crypto';
import { newId } from '../../lib/ids';
import { addMember, holdsOwner } from '../members';
import type { Usage } from '../../http/hooks';
import { systemRoleId } from '../roles';
import { addTeamMember } from '../teams';
import * as repo from './invites.repo';
import { insertAuditEntries } from '../../events/records';

type Invite = components['schemas']['Invite'];
type InviteCreate = components['schemas']['InviteCreate'];

const WHAT = 'invite';
export const INVITE_TTL_MS = 7 * 24 * 3_600_000;
/** At most one email per invite in this time (the first send included). */
export const RESEND_INTERVAL_MS = 60_000;
const PENDING_CONSTRAINT = 'invites_pending_email_key';
/** The emailed link's token: a readable prefix, 32 random bytes; only its SHA-256 is stored. */
const TOKEN_PREFIX = 'cpinv';

export function inviteStatus(row: Pick<repo.InviteRow, 'status' | 'expires_at'>, now: Date): Invite['status'] {
  return row.status === 'pending' && row.expires_at.getTime() <= now.getTime() ? 'expired' : row.status;
}

function toInvite(row: repo.InviteRow, roles: readonly repo.RoleFacts[], teams: readonly { id: string; name: string }[], now: Date): Invite {
  return {
    id: row.id,
    email: row.email,
    roles: roles.map((r) => ({ id: r.id, name: r.name, is_system: r.is_system, seat_class: r.seat_class })),
    teams: teams.map((t) => ({ id: t.id, name: t.name })),
    status: inviteStatus(row, now),
    invited_by_user_id: row.invited_by_user_id,
    expires_at: row.expires_at.toISOString(),
    accepted_at: row.accepted_at?.toISOString() ?? null,
    accepted_by_user_id: row.accepted_by_user_id,
    revoked_at: row.revoked_at?.toISOString() ?? null,
    revoked_by_user_id: row.revoked_by_user_id,
    message: row.message,
    last_sent_at: row.last_sent_at.toISOString(),
    send_count: row.send_count,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

async function present(db: Executor, rows: repo.InviteRow[], now: Date): Promise<Invite[]> {
  const { roles, teams } = await repo.grantsOf(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((row) => toInvite(row, roles.get(row.id) ?? [], teams.get(row.id) ?? [], now));
}

const eventInvite = (row: repo.InviteRow, roleIds: readonly string[]) => ({
  id: row.id,
  email: row.email,
  role_ids: [...roleIds],
  invited_by_user_id: row.invited_by_user_id,
  expires_at: row.expires_at.toISOString(),
});

/**
 * Nobody grants what they do not hold: every permission of every role must be among the
 * caller's effective permissions here, and only an Owner grants the Owner role. 403
 * `permission_escalation` otherwise. Shared by invites and org domains' default role.
 */
export async function checkGrantable(ctx: RequestContext, roles: readonly repo.RoleFacts[]): Promise<void> {
  const held = ctx.org?.permissions ?? new Set<string>();
  for (const role of roles) {
    const missing = rolePermissions(role).filter((p) => !held.has(p));
    if (missing.length > 0) {
      throw new ApiError(
        'permission_escalation',
        `The role ${role.name} grants ${missing.join(', ')}, which you do not hold; you can only grant what you have.`,
      );
    }
    if (role.system_key === 'owner' && !(ctx.caller?.userId && (await holdsOwner(ctx.db, ctx.orgId, ctx.caller.userId)))) {
      throw new ApiError('permission_escalation', 'Only an Owner may grant the Owner role.');
    }
  }
}

/** The roles named, each a role of this organization (else 400 `unknown_reference` pointing at each). */
export async function resolveRoles(db: Executor, orgId: string, ids: readonly string[], pointer: (index: number) => string): Promise<repo.RoleFacts[]> {
  const found = await repo.orgRoles(db, orgId, ids);
  const byId = new Map(found.map((r) => [r.id, r]));
  const unknown: ValidationProblem[] = ids.flatMap((id, i) =>
    byId.has(id) ? [] : [{ in: 'body' as const, pointer: pointer(i), message: `is not a role of this organization` }],
  );
  if (unknown.length > 0) throw new ApiError('unknown_reference', 'Some roles are not roles of this organization; see errors.', { errors: unknown });
  return ids.map((id) => byId.get(id) as repo.RoleFacts);
}

async function resolveTeams(db: Executor, orgId: string, ids: readonly string[]) {
  const found = await repo.orgTeams(db, orgId, ids);
  const known = new Set(found.map((t) => t.id));
  const unknown: ValidationProblem[] = ids.flatMap((id, i) =>
    known.has(id) ? [] : [{ in: 'body' as const, pointer: `/team_ids/${i}`, message: 'is not a team of this organization' }],
  );
  if (unknown.length > 0) throw new ApiError('unknown_reference', 'Some teams are not teams of this organization; see errors.', { errors: unknown });
  return ids.map((id) => found.find((t) => t.id === id) as { id: string; name: string });
}

async function refuseMember(db: Executor, orgId: string, email: string): Promise<void> {
  const membership = await repo.membershipOfEmail(db, orgId, email);
  if (membership && membership.status !== 'removed') {
    throw new ApiError(
      'already_member',
      `${email} is already a member of this organization${membership.status === 'suspended' ? ' (suspended; reactivate them instead)' : ''}.`,
    );
  }
}

async function checkSeats(db: Executor, orgId: string, roles: readonly repo.RoleFacts[], now: Date, exceptInviteId: string | null): Promise<void> {
  if (!roles.some((r) => r.seat_class === 'billable')) return;
  await requireWithinLimit(db, orgId, 'seats', () => seatsInUse(db, orgId, { now, exceptInviteId }));
}

/** The accept link: the server's public address (BASE_URL), at the operation that accepts. */
export function acceptLink(ctx: RequestContext, token: string): string {
  return `${ctx.deps.config.baseUrl}/auth/invite/activate?token=${encodeURIComponent(token)}`;
}

async function sendInviteEmail(ctx: RequestContext, row: repo.InviteRow, token: string): Promise<void> {
  const org = await repo.organizationName(ctx.db, row.org_id);
  const inviter = row.invited_by_user_id ? await repo.userFacts(ctx.db, row.invited_by_user_id) : undefined;
  const orgName = org?.name ?? 'an organization';
  const who = inviter ? (inviter.name ? `${inviter.name} (${inviter.email})` : inviter.email) : 'An administrator';
  const text = [
    `${who} invited you to join ${orgName} on the MCP control plane.`,
    ...(row.message ? ['', row.message] : []),
    '',
    `Accept the invitation: ${acceptLink(ctx, token)}`,
    '',
    `The link works once and until ${row.expires_at.toISOString()}. If you did not expect this invitation, ignore this email.`,
  ].join('\n');
  try {
    await ctx.deps.mailer.send({ to: [row.email], subject: `You are invited to join ${orgName}`, text });
  } catch (err) {
    // The invite stands; a resend (after RESEND_INTERVAL_MS) tries again. Never the token in the log.
    ctx.log.warn({ invite_id: row.id, err: (err as Error).message }, 'invite email not sent');
  }
}

export async function list(ctx: RequestContext, page: PageRequest, filter: { status?: repo.ListedStatus; email?: string }): Promise<Page<Invite>> {
  const now = new Date();
  const rows = await repo.listInvites(ctx.db, ctx.orgId, page, filter, now);
  const shown = await present(ctx.db, rows.slice(0, page.limit), now);
  return toPage(rows, page, (row) => shown.find((i) => i.id === row.id) as Invite);
}

export async function get(ctx: RequestContext, id: string): Promise<Invite> {
  const row = await repo.findInvite(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return (await present(ctx.db, [row], new Date()))[0] as Invite;
}

export async function create(ctx: RequestContext, body: InviteCreate): Promise<Invite> {
  const email = body.email.toLowerCase();
  const roleIds = body.role_ids ?? [await systemRoleId(ctx.db, ctx.orgId, 'member')];
  const roles = await resolveRoles(ctx.db, ctx.orgId, roleIds, (i) => `/role_ids/${i}`);
  const teams = await resolveTeams(ctx.db, ctx.orgId, body.team_ids ?? []);
  await checkGrantable(ctx, roles);
  await refuseMember(ctx.db, ctx.orgId, email);
  const token = randomSecret(TOKEN_PREFIX);
  const now = new Date();
  const id = newId('invite');
  const row = await conflictOnUnique(
    PENDING_CONSTRAINT,
    () => new ApiError('invite_pending', `An invite to ${email} is pending already; resend that one instead.`),
    () =>
      ctx.write(async (w) => {
        await checkSeats(w.db, ctx.orgId, roles, now, null);
        const inserted = await repo.insertInvite(w.db, {
          id,
          org_id: ctx.orgId,
          email,
          token_hash: hashSecret(token),
          message: body.message ?? null,
          invited_by_user_id: ctx.caller?.userId ?? null,
          expires_at: new Date(now.getTime() + INVITE_TTL_MS),
          last_sent_at: now,
          send_count: 1,
        });
        await repo.insertGrants(
          w.db,
          id,
          roles.map((r) => r.id),
          teams.map((t) => t.id),
        );
        w.audit({
          targetId: id,
          changes: { email, role_ids: roles.map((r) => r.id), team_ids: teams.map((t) => t.id), expires_at: inserted.expires_at.toISOString() },
        });
        w.emit('invite.sent', {
          invite: eventInvite(
            inserted,
            roles.map((r) => r.id),
          ),
          resent: false,
        });
        return inserted;
      }),
  );
  await sendInviteEmail(ctx, row, token);
  return toInvite(row, roles, teams, new Date());
}

function tooSoon(row: repo.InviteRow, now: Date): ApiError {
  const seconds = Math.max(1, Math.ceil((row.last_sent_at.getTime() + RESEND_INTERVAL_MS - now.getTime()) / 1000));
  return new ApiError('rate_limited', `This invite was emailed moments ago; resend it in ${seconds} seconds.`, { headers: { 'Retry-After': String(seconds) } });
}

export async function resend(ctx: RequestContext, id: string): Promise<Invite> {
  const current = await repo.findInvite(ctx.db, ctx.orgId, id);
  if (!current) throw notFound(WHAT, id);
  if (current.status !== 'pending')
    throw new ApiError('invalid_transition', `The invite is ${current.status}; only a pending or expired invite can be resent. Send a new one instead.`);
  const now = new Date();
  if (now.getTime() - current.last_sent_at.getTime() < RESEND_INTERVAL_MS) throw tooSoon(current, now);
  await refuseMember(ctx.db, ctx.orgId, current.email);
  const { roles: grants, teams: teamGrants } = await repo.grantsOf(ctx.db, [id]);
  const roles = grants.get(id) ?? [];
  await checkGrantable(ctx, roles);
  const token = randomSecret(TOKEN_PREFIX);
  const row = await ctx.write(async (w) => {
    await checkSeats(w.db, ctx.orgId, roles, now, id);
    const claimed = await repo.claimResend(w.db, ctx.orgId, id, {
      tokenHash: hashSecret(token),
      now,
      expiresAt: new Date(now.getTime() + INVITE_TTL_MS),
      intervalMs: RESEND_INTERVAL_MS,
    });
    if (!claimed) {
      const again = await repo.findInvite(w.db, ctx.orgId, id);
      if (!again) throw notFound(WHAT, id);
      if (again.status !== 'pending')
        throw new ApiError('invalid_transition', `The invite is ${again.status}; only a pending or expired invite can be resent.`);
      throw tooSoon(again, now);
    }
    w.audit({
      targetId: id,
      changes: { send_count: claimed.send_count, expires_at: claimed.expires_at.toISOString(), was_expired: current.expires_at.getTime() <= now.getTime() },
    });
    w.emit('invite.sent', {
      invite: eventInvite(
        claimed,
        roles.map((r) => r.id),
      ),
      resent: true,
    });
    return claimed;
  });
  await sendInviteEmail(ctx, row, token);
  return toInvite(row, roles, teamGrants.get(id) ?? [], new Date());
}

export async function revoke(ctx: RequestContext, id: string): Promise<Invite> {
  const now = new Date();
  const row = await ctx.write(async (w) => {
    const current = await repo.findInvite(w.db, ctx.orgId, id, true);
    if (!current) throw notFound(WHAT, id);
    const status = inviteStatus(current, now);
    if (status !== 'pending') throw new ApiError('invalid_transition', `The invite is ${status}; only a pending invite can be revoked.`);
    const revoked = await repo.updateInvite(w.db, ctx.orgId, id, { status: 'revoked', revoked_at: now, revoked_by_user_id: ctx.caller?.userId ?? null });
    if (!revoked) throw notFound(WHAT, id);
    const { roles } = await repo.grantsOf(w.db, [id]);
    w.audit({ targetId: id, changes: { email: revoked.email, status: { from: 'pending', to: 'revoked' } } });
    w.emit('invite.revoked', {
      invite: eventInvite(
        revoked,
        (roles.get(id) ?? []).map((r) => r.id),
      ),
    });
    return revoked;
  });
  return (await present(ctx.db, [row], now))[0] as Invite;
}

/**
 * What an emailed link's token names, without changing anything: a usable invite (with the
 * invited address and its organization), or why not. For flows that must decide before the
 * person is signed in.
 */
export async function peekInvite(
  db: Executor,
  token: string,
): Promise<{ ok: true; email: string; orgId: string } | { ok: false; reason: 'link_invalid' | 'link_expired' | 'invite_revoked' }> {
  const invite = await db
    .selectFrom('invites')
    .select(['email', 'org_id', 'status', 'expires_at'])
    .where('token_hash', '=', hashSecret(token))
    .executeTakeFirst();
  if (!invite || invite.status === 'accepted') return { ok: false, reason: 'link_invalid' };
  if (invite.status === 'revoked') return { ok: false, reason: 'invite_revoked' };
  if (invite.expires_at.getTime() <= Date.now()) return { ok: false, reason: 'link_expired' };
  return { ok: true, email: invite.email, orgId: invite.org_id };
}

export type AcceptOutcome =
  | { ok: true; orgId: string; inviteId: string; userId: string; joined: boolean }
  | { ok: false; reason: 'link_invalid' | 'link_expired' | 'invite_revoked' | 'invite_email_mismatch' };

/**
 * Accepts an invite by the token of its emailed link, for a signed-in person (activateInvite
 * calls this; so may any sign-in flow that ends on an invite link). In one transaction: the
 * invite becomes `accepted`, the person an active member (`via: invite`) with its roles (the
 * Member role when every role it named was deleted since) and teams, the audit entry
 * `invite.accepted` (actor: the person; target: the invite) and the event `member.joined`.
 * A person who is a member already (active or suspended) keeps their membership as it is;
 * the invite is still used up. The person's email must be the invited one.
 *
 * The caller must afterwards let the credential cache forget (AppDeps.afterCommit), as after
 * any write: a membership was made.
 */
export async function acceptInvite(
  db: Db,
  token: string,
  userId: string,
  client: { ip?: string | null; userAgent?: string | null; requestId?: string | null } = {},
): Promise<AcceptOutcome> {
  return db.transaction().execute(async (trx) => {
    const now = new Date();
    const invite = await repo.findInviteByTokenHash(trx, hashSecret(token));
    if (!invite) return { ok: false, reason: 'link_invalid' } as const;
    if (invite.status === 'revoked') return { ok: false, reason: 'invite_revoked' } as const;
    if (invite.status === 'accepted') return { ok: false, reason: 'link_invalid' } as const;
    if (invite.expires_at.getTime() <= now.getTime()) return { ok: false, reason: 'link_expired' } as const;
    const user = await repo.userFacts(trx, userId);
    if (!user || user.email.toLowerCase() !== invite.email) return { ok: false, reason: 'invite_email_mismatch' } as const;

    const orgId = invite.org_id;
    const { roles: grants, teams: teamGrants } = await repo.grantsOf(trx, [invite.id]);
    const roleIds = (grants.get(invite.id) ?? []).map((r) => r.id);
    if (roleIds.length === 0) roleIds.push(await systemRoleId(trx, orgId, 'member'));
    const teamIds = (teamGrants.get(invite.id) ?? []).map((t) => t.id);

    const existing = await trx
      .selectFrom('memberships')
      .select('status')
      .where('org_id', '=', orgId)
      .where('user_id', '=', userId)
      .forUpdate()
      .executeTakeFirst();
    const joined = !existing || existing.status === 'removed';
    if (existing?.status === 'removed') {
      await trx.deleteFrom('role_assignments').where('org_id', '=', orgId).where('user_id', '=', userId).execute();
      await trx.deleteFrom('team_members').where('org_id', '=', orgId).where('user_id', '=', userId).execute();
      await trx
        .updateTable('memberships')
        .set({ status: 'active', via: 'invite', joined_at: now, status_reason: null })
        .where('org_id', '=', orgId)
        .where('user_id', '=', userId)
        .execute();
      await trx
        .insertInto('role_assignments')
        .values(roleIds.map((role_id) => ({ org_id: orgId, user_id: userId, role_id })))
        .execute();
    } else if (!existing) {
      await addMember(trx, { orgId, userId, via: 'invite', roleIds });
    }
    if (joined) {
      for (const teamId of teamIds) await addTeamMember(trx, { teamId, orgId, userId, addedByUserId: invite.invited_by_user_id });
    }
    await repo.updateInvite(trx, orgId, invite.id, { status: 'accepted', accepted_at: now, accepted_by_user_id: userId });
    await insertAuditEntries(trx, {
      id: newId('auditEvent'),
      org_id: orgId,
      actor_type: 'user',
      actor_id: userId,
      actor_user_id: userId,
      action: 'invite.accepted',
      target_type: 'invite',
      target_id: invite.id,
      changes: JSON.stringify({ email: invite.email, joined, role_ids: joined ? roleIds : [], team_ids: joined ? teamIds : [] }),
      ip: client.ip ?? null,
      user_agent: client.userAgent ?? null,
      request_id: client.requestId ?? null,
    });
    if (joined) {
      await appendEvents(trx, orgId, [{ type: 'member.joined', data: { member: { user_id: userId, email: user.email, name: user.name }, via: 'invite' } }], {
        actor_type: 'user',
        actor_id: userId,
      });
    }
    return { ok: true, orgId, inviteId: invite.id, userId, joined } as const;
  });
}

/** Pending invites name roles: deleting one of them would change what the invitee gets, so it is refused while they wait (the roleUsage hook). */
export async function roleUsage(db: Executor, orgId: string, roleId: string): Promise<Usage> {
  return { count: await repo.pendingInvitesNamingRole(db, orgId, roleId, new Date()), what: 'pending invites' };
}
