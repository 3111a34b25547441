import { randomBytes } from 'node:crypto';
import { mintApiToken } from '../../src/auth/api-tokens';
import { SESSION_PREFIX } from '../../src/auth/credentials';
import type { Db } from '../../src/db/database';
import type { MembershipStatus, SystemRoleKey } from '../../src/db/schema';
import { createOrganizationWithOwner } from '../../src/areas/organizations/organizations.service';
import { PERMISSIONS } from '../../src/areas/roles/system-roles';
import { hashSecret, randomSecret } from '../../src/lib/crypto';
import { newId } from '../../src/lib/ids';

const unique = () => randomBytes(4).toString('hex');

export interface SeededOrg {
  orgId: string;
  ownerId: string;
  /** An API token of the owner with every permission. */
  token: string;
  roleIds: Record<SystemRoleKey, string>;
}

/** Test data written through the same code paths the service uses. */
export class Factories {
  constructor(private readonly db: Db) {}

  async user(input: { email?: string; name?: string | null; staff?: boolean } = {}): Promise<string> {
    const id = newId('user');
    await this.db
      .insertInto('users')
      .values({ id, email: input.email ?? `user-${unique()}@example.com`, name: input.name ?? null, is_root_org_staff: input.staff ?? false })
      .execute();
    return id;
  }

  async org(input: { name?: string; ownerId?: string; requireMfa?: boolean } = {}): Promise<SeededOrg> {
    const ownerId = input.ownerId ?? (await this.user());
    const created = await this.db.transaction().execute((trx) =>
      createOrganizationWithOwner(trx, { name: input.name ?? `Org ${unique()}`, ownerUserId: ownerId }),
    );
    if (input.requireMfa) await this.db.updateTable('organizations').set({ require_mfa: true }).where('id', '=', created.orgId).execute();
    const token = await this.token(created.orgId, ownerId);
    return { orgId: created.orgId, ownerId, token, roleIds: created.roleIds as Record<SystemRoleKey, string> };
  }

  /** Adds a person to an organization with system roles (by key) or role ids. */
  async member(orgId: string, input: { userId?: string; roles?: (SystemRoleKey | string)[]; status?: MembershipStatus; via?: 'invite' | 'scim' } = {}): Promise<string> {
    const userId = input.userId ?? (await this.user());
    await this.db.insertInto('memberships').values({ org_id: orgId, user_id: userId, status: input.status ?? 'active', via: input.via ?? 'invite' }).execute();
    for (const role of input.roles ?? ['member']) {
      const roleId = role.startsWith('role_')
        ? role
        : (await this.db.selectFrom('roles').select('id').where('org_id', '=', orgId).where('system_key', '=', role as SystemRoleKey).executeTakeFirstOrThrow()).id;
      await this.db.insertInto('role_assignments').values({ org_id: orgId, user_id: userId, role_id: roleId }).execute();
    }
    return userId;
  }

  async customRole(orgId: string, permissions: string[], name = `Role ${unique()}`): Promise<string> {
    const id = newId('role');
    await this.db.insertInto('roles').values({ id, org_id: orgId, name, description: null, permissions, is_system: false, system_key: null, seat_class: 'billable' }).execute();
    return id;
  }

  async token(orgId: string, userId: string, permissions: readonly string[] = PERMISSIONS, options: { expiresAt?: Date } = {}): Promise<string> {
    const minted = await this.db.transaction().execute((trx) =>
      mintApiToken(trx, { orgId, userId, name: `test ${unique()}`, permissions, expiresAt: options.expiresAt ?? null }),
    );
    return minted.token;
  }

  /** An organization event in the outbox, as a change that emits one writes it. */
  async event(orgId: string, type: string, data: Record<string, unknown>, actorUserId: string | null = null): Promise<string> {
    const id = newId('outboxEvent');
    await this.db
      .insertInto('outbox')
      .values({ id, org_id: orgId, event_type: type, payload: JSON.stringify(data), actor_type: actorUserId ? 'user' : 'system', actor_id: actorUserId })
      .execute();
    return id;
  }

  async tokenId(token: string): Promise<string> {
    return (await this.db.selectFrom('api_tokens').select('id').where('token_hash', '=', hashSecret(token)).executeTakeFirstOrThrow()).id;
  }

  /** A web-app session; sign-in flows come later, so tests create sessions directly. */
  async session(userId: string, input: { secondFactor?: boolean; expiresAt?: Date } = {}): Promise<string> {
    const secret = randomSecret(SESSION_PREFIX);
    await this.db
      .insertInto('sessions')
      .values({
        id: newId('session'),
        user_id: userId,
        token_hash: hashSecret(secret),
        second_factor_at: input.secondFactor ? new Date() : null,
        expires_at: input.expiresAt ?? new Date(Date.now() + 86_400_000),
      })
      .execute();
    return secret;
  }

  async team(orgId: string, name: string, memberIds: string[] = []): Promise<string> {
    const id = newId('team');
    await this.db.insertInto('teams').values({ id, org_id: orgId, name, description: null }).execute();
    for (const userId of memberIds) await this.db.insertInto('team_members').values({ team_id: id, org_id: orgId, user_id: userId }).execute();
    return id;
  }

  async passkey(userId: string): Promise<string> {
    const id = newId('passkey');
    await this.db.insertInto('passkeys').values({ id, user_id: userId, name: 'Laptop', credential_id: unique(), public_key: 'test' }).execute();
    return id;
  }

  async enableTotp(userId: string): Promise<void> {
    await this.db.updateTable('users').set({ totp_secret_enc: 'test', totp_enabled_at: new Date() }).where('id', '=', userId).execute();
  }

  auditEntries(orgId: string, action?: string) {
    return this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('org_id', '=', orgId)
      .$if(action !== undefined, (q) => q.where('action', '=', action as string))
      .orderBy('id')
      .execute();
  }
}
