import { domainToASCII } from 'node:url';
import { sql, type Transaction } from 'kysely';
import type { Database } from '../../db/schema';
import type { Executor } from '../../db/database';
import { seatsInUse } from '../../access/seats';
import { requireWithinLimit } from '../../access/entitlements';
import { appendEvents } from '../../events/outbox';
import { insertAuditEntries } from '../../events/records';
import { ApiError } from '../../http/errors';
import { createUser, findUserByEmail } from '../../identity/users';
import { newId } from '../../lib/ids';
import { addMember } from '../members';
import { systemRoleId } from '../roles';
import * as repo from './sso-connections.repo';
import { isComplete } from './sso-connections.service';

/**
 * Signing a person in through an SSO connection, whichever protocol carried the identity:
 * which account the identity is, and the membership it holds in the connection's
 * organization. Shared by the OpenID Connect and SAML endpoints (src/protocols/oidc, saml).
 */

export type SsoConnectionRow = repo.ConnectionRow;

/** Who the identity provider says signed in, read only from what it signed. */
export interface SsoIdentity {
  issuer: string;
  /** The OIDC `sub`, or the SAML NameID. */
  subject: string;
  email: string | null;
  name: string | null;
  /** Microsoft Entra's object id (`oid`, or its SAML objectidentifier claim), which SCIM provisioning stores as `externalId`. */
  objectId: string | null;
}

export type SsoOutcome = { userId: string; joined: boolean } | { reason: 'not_provisioned' | 'account_not_linked' | 'account_suspended' | 'email_unverified' };

async function pendingInvite(db: Executor, orgId: string, email: string): Promise<boolean> {
  const row = await db
    .selectFrom('invites')
    .select('id')
    .where('org_id', '=', orgId)
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .where('status', '=', 'pending')
    .where('expires_at', '>', new Date())
    .executeTakeFirst();
  return row !== undefined;
}

/** The connection a sign-in endpoint serves: one that exists, of this protocol, turned on and complete. */
export async function usableConnection(db: Executor, id: string, type: 'saml' | 'oidc'): Promise<SsoConnectionRow | null> {
  const row = await repo.findConnectionById(db, id);
  return row && row.type === type && row.status === 'active' && isComplete(row) ? row : null;
}

export function emailDomain(email: string): string | null {
  const at = email.lastIndexOf('@');
  if (at < 1) return null;
  const domain = domainToASCII(
    email
      .slice(at + 1)
      .trim()
      .replace(/\.$/, '')
      .toLowerCase(),
  );
  return domain || null;
}

/** The active connection serving the address's domain, whichever organization's. */
export async function connectionForEmail(db: Executor, email: string): Promise<SsoConnectionRow | null> {
  const domain = emailDomain(email);
  if (!domain) return null;
  const row = await repo.connectionForDomain(db, domain);
  return row && row.status === 'active' && isComplete(row) ? row : null;
}

/**
 * 403 `sso_required` when the address's domain is served by an active connection that
 * enforces SSO: the other sign-in methods (emailed links, passkeys, social sign-in) call this.
 */
export async function refuseUnlessSsoOptional(db: Executor, email: string): Promise<void> {
  const connection = await connectionForEmail(db, email);
  if (connection?.enforce) {
    throw new ApiError('sso_required', `People of ${emailDomain(email)} sign in through their organization's SSO (${connection.name}).`);
  }
}

/** Whether the address's domain must sign in through SSO (for flows that answer with a redirect rather than an error). */
export async function ssoRequired(db: Executor, email: string): Promise<boolean> {
  return (await connectionForEmail(db, email))?.enforce === true;
}

/**
 * The account an identity signs in to, and its membership in the connection's organization:
 * 1. the account linked to (connection, issuer, subject) before;
 * 2. the member whose SCIM `externalId` is the subject (or Entra object id): provisioning
 *    and sign-in converge on one person;
 * 3. otherwise the email, only when its domain is one the connection serves (verified by the
 *    organization): an existing account is adopted only when the organization vouched for
 *    it (a member, or a pending invite to the address); any other existing account is never
 *    taken over (`account_not_linked`); a new address gets a new account.
 * Someone not a member joins with the connection's default role when it provisions just in
 * time (audit and event `member.joined`); an invited person signs in and accepts the invite
 * next; anyone else's reason is `not_provisioned`.
 */
export async function ssoAccount(
  db: Transaction<Database>,
  connection: SsoConnectionRow,
  identity: SsoIdentity,
  client: { ip?: string | null; userAgent?: string | null; requestId?: string | null },
): Promise<SsoOutcome> {
  await sql`select pg_advisory_xact_lock(hashtext(${`sso:${connection.id}:${identity.issuer}:${identity.subject}`}))`.execute(db);
  const now = new Date();
  const orgId = connection.org_id;
  let userId: string | null = null;
  const linked = await db
    .updateTable('sso_identities')
    .set({ email: identity.email, last_sign_in_at: now })
    .where('connection_id', '=', connection.id)
    .where('issuer', '=', identity.issuer)
    .where('subject', '=', identity.subject)
    .returning('user_id')
    .executeTakeFirst();
  if (linked) userId = linked.user_id;
  if (!userId) {
    const externalIds = [identity.subject, ...(identity.objectId ? [identity.objectId] : [])];
    const provisioned = await db
      .selectFrom('memberships')
      .select('user_id')
      .where('org_id', '=', orgId)
      .where('external_id', 'in', externalIds)
      .executeTakeFirst();
    userId = provisioned?.user_id ?? null;
  }
  let invited: boolean | null = null;
  if (!userId) {
    const domain = identity.email ? emailDomain(identity.email) : null;
    const served = domain
      ? await db
          .selectFrom('sso_connection_domains')
          .select('domain')
          .where('connection_id', '=', connection.id)
          .where('domain', '=', domain)
          .executeTakeFirst()
      : undefined;
    if (!identity.email || !served) return { reason: 'email_unverified' };
    const existing = await findUserByEmail(db, identity.email);
    invited = await pendingInvite(db, orgId, identity.email);
    if (existing) {
      // The organization vouches for an existing account by its membership or an invite to the address.
      const member = await db.selectFrom('memberships').select('status').where('org_id', '=', orgId).where('user_id', '=', existing.id).executeTakeFirst();
      if (!member && !invited) return { reason: 'account_not_linked' };
      userId = existing.id;
    } else {
      if (!connection.jit_enabled && !invited) return { reason: 'not_provisioned' };
      userId = await createUser(db, { email: identity.email, name: identity.name });
    }
  }
  if (!linked) {
    await db
      .insertInto('sso_identities')
      .values({
        connection_id: connection.id,
        issuer: identity.issuer,
        subject: identity.subject,
        user_id: userId,
        email: identity.email,
        last_sign_in_at: now,
      })
      .onConflict((oc) => oc.columns(['connection_id', 'issuer', 'subject']).doNothing())
      .execute();
  }
  const membership = await db.selectFrom('memberships').select('status').where('org_id', '=', orgId).where('user_id', '=', userId).executeTakeFirst();
  let joined = false;
  if (membership && membership.status !== 'active') return { reason: 'account_suspended' };
  if (!membership) {
    if (!connection.jit_enabled) {
      // Invited: signed in without a membership yet; accepting the invite makes one.
      if (invited ?? (identity.email ? await pendingInvite(db, orgId, identity.email) : false)) {
        await db.updateTable('sso_connections').set({ last_sign_in_at: now }).where('id', '=', connection.id).execute();
        return { userId, joined: false };
      }
      return { reason: 'not_provisioned' };
    }
    try {
      await requireWithinLimit(db, orgId, 'seats', () => seatsInUse(db, orgId, {}));
    } catch (err) {
      if (err instanceof ApiError && err.code === 'entitlement_exceeded') return { reason: 'not_provisioned' };
      throw err;
    }
    const roleId = connection.jit_default_role_id ?? (await systemRoleId(db, orgId, 'member'));
    await addMember(db, { orgId, userId, via: 'sso_jit', roleIds: [roleId] });
    const email = identity.email ?? (await db.selectFrom('users').select('email').where('id', '=', userId).executeTakeFirstOrThrow()).email;
    await insertAuditEntries(db, {
      id: newId('auditEvent'),
      org_id: orgId,
      actor_type: 'user',
      actor_id: userId,
      actor_user_id: userId,
      action: 'member.joined',
      target_type: 'member',
      target_id: userId,
      changes: JSON.stringify({ via: 'sso_jit', sso_connection_id: connection.id, role_ids: [roleId] }),
      ip: client.ip ?? null,
      user_agent: client.userAgent ?? null,
      request_id: client.requestId ?? null,
    });
    await appendEvents(db, orgId, [{ type: 'member.joined', data: { member: { user_id: userId, email, name: identity.name }, via: 'sso_jit' } }], {
      actor_type: 'user',
      actor_id: userId,
    });
    joined = true;
  }
  await db.updateTable('sso_connections').set({ last_sign_in_at: now }).where('id', '=', connection.id).execute();
  return { userId, joined };
}
