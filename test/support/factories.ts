import { randomBytes } from 'node:crypto';
import { addMember } from '../../src/areas/members/members.repo';
import { createOrganizationWithOwner } from '../../src/areas/organizations/organizations.service';
import { insertCustomRole, systemRoleId } from '../../src/areas/roles/roles.repo';
import { addTeamMember, insertTeam } from '../../src/areas/teams/teams.repo';
import { mintApiToken } from '../../src/identity/api-tokens';
import { PERMISSIONS } from '../../src/identity/permissions';
import { startSession } from '../../src/identity/sessions';
import { createUser } from '../../src/identity/users';
import type { Db } from '../../src/db/database';
import type { MembershipStatus, SystemRoleKey } from '../../src/db/schema';
import type { EventDataMap, EventType } from '../../src/events/catalog';
import { appendEvents } from '../../src/events/outbox';
import { hashSecret } from '../../src/lib/crypto';
import { newId } from '../../src/lib/ids';

const unique = () => randomBytes(4).toString('hex');

export interface SeededOrg {
  orgId: string;
  ownerId: string;
  /** An API token of the owner with every permission. */
  token: string;
  roleIds: Record<SystemRoleKey, string>;
}

/** Test data written through the same repositories the service uses. */
export class Factories {
  constructor(private readonly db: Db) {}

  user(input: { email?: string; name?: string | null; staff?: boolean } = {}): Promise<string> {
    return createUser(this.db, { email: input.email ?? `user-${unique()}@example.com`, name: input.name ?? null, isRootOrgStaff: input.staff ?? false });
  }

  async org(input: { name?: string; ownerId?: string; requireMfa?: boolean } = {}): Promise<SeededOrg> {
    const ownerId = input.ownerId ?? (await this.user());
    const created = await this.db
      .transaction()
      .execute((trx) => createOrganizationWithOwner(trx, { name: input.name ?? `Org ${unique()}`, ownerUserId: ownerId }));
    if (input.requireMfa) await this.db.updateTable('organizations').set({ require_mfa: true }).where('id', '=', created.orgId).execute();
    const token = await this.token(created.orgId, ownerId);
    return { orgId: created.orgId, ownerId, token, roleIds: created.roleIds as Record<SystemRoleKey, string> };
  }

  /** Adds a person to an organization with system roles (by key) or role ids. */
  async member(
    orgId: string,
    input: { userId?: string; roles?: (SystemRoleKey | string)[]; status?: MembershipStatus; via?: 'invite' | 'scim' } = {},
  ): Promise<string> {
    const userId = input.userId ?? (await this.user());
    const roleIds = await Promise.all(
      (input.roles ?? ['member']).map((role) => (role.startsWith('role_') ? role : systemRoleId(this.db, orgId, role as SystemRoleKey))),
    );
    await addMember(this.db, { orgId, userId, status: input.status ?? 'active', via: input.via ?? 'invite', roleIds });
    return userId;
  }

  customRole(orgId: string, permissions: string[], name = `Role ${unique()}`): Promise<string> {
    return insertCustomRole(this.db, { orgId, name, permissions });
  }

  async token(orgId: string, userId: string, permissions: readonly string[] = PERMISSIONS, options: { expiresAt?: Date } = {}): Promise<string> {
    const minted = await this.db
      .transaction()
      .execute((trx) => mintApiToken(trx, { orgId, userId, name: `test ${unique()}`, permissions, expiresAt: options.expiresAt ?? null }));
    return minted.token;
  }

  /** An organization event in the outbox, as a change that emits one writes it; `data` is typed by the event's schema. */
  async event<T extends EventType>(orgId: string, type: T, data: EventDataMap[T], actorUserId: string | null = null): Promise<string> {
    const [id] = await appendEvents(this.db, orgId, [{ type, data }], { actor_type: actorUserId ? 'user' : 'system', actor_id: actorUserId });
    return id as string;
  }

  async tokenId(token: string): Promise<string> {
    return (await this.db.selectFrom('api_tokens').select('id').where('token_hash', '=', hashSecret(token)).executeTakeFirstOrThrow()).id;
  }

  /** A web-app session, started as sign-in starts one; `expiresAt` moves its hard end (to test expiry). */
  async session(userId: string, input: { secondFactor?: boolean; expiresAt?: Date } = {}): Promise<string> {
    const session = await startSession(this.db, { userId, secondFactorAt: input.secondFactor ? new Date() : null });
    if (input.expiresAt) await this.db.updateTable('sessions').set({ expires_at: input.expiresAt }).where('id', '=', session.id).execute();
    return session.secret;
  }

  async team(orgId: string, name: string, memberIds: string[] = []): Promise<string> {
    const teamId = await insertTeam(this.db, { orgId, name });
    for (const userId of memberIds) await addTeamMember(this.db, { teamId, orgId, userId });
    return teamId;
  }

  // Passkeys and TOTP have no repository until sign-in is built: written directly for now.
  async passkey(userId: string): Promise<string> {
    const id = newId('passkey');
    await this.db.insertInto('passkeys').values({ id, user_id: userId, name: 'Laptop', credential_id: unique(), public_key: 'test' }).execute();
    return id;
  }

  async enableTotp(userId: string): Promise<void> {
    await this.db.updateTable('users').set({ totp_secret_enc: 'test', totp_enabled_at: new Date() }).where('id', '=', userId).execute();
  }

  async auditEntries(orgId: string, action?: string) {
    const rows = await this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('org_id', '=', orgId)
      .$if(action !== undefined, (q) => q.where('action', '=', action as string))
      .orderBy('id')
      .execute();
    return rows.map((row) => ({ ...row, changes: row.changes as Record<string, unknown> }));
  }
}
