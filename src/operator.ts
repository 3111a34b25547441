import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Transaction } from 'kysely';
import { mintApiToken, revokeApiToken } from './auth/api-tokens';
import type { Db } from './db/database';
import type { Database } from './db/schema';
import { createOrganizationWithOwner } from './areas/organizations/organizations.service';
import { PERMISSIONS } from './areas/roles/system-roles';
import { newId } from './lib/ids';

/**
 * What the operator does from the command line (scripts/cli.ts) for what the API refuses to
 * tokens: the first organization, further organizations, and API tokens. Each change writes
 * an audit entry with the actor `operator`.
 */

export class OperatorError extends Error {
  override readonly name = 'OperatorError';
}

async function audit(trx: Transaction<Database>, orgId: string, action: string, targetType: string, targetId: string, changes: Record<string, unknown>) {
  await trx
    .insertInto('audit_log')
    .values({ id: newId('auditEvent'), org_id: orgId, actor_type: 'operator', actor_id: null, actor_user_id: null, action, target_type: targetType, target_id: targetId, changes: JSON.stringify(changes), ip: null, user_agent: null, request_id: null })
    .execute();
}

async function findOrCreateUser(trx: Transaction<Database>, email: string, name: string | null): Promise<string> {
  const existing = await trx.selectFrom('users').select('id').where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase())).executeTakeFirst();
  if (existing) return existing.id;
  const id = newId('user');
  await trx.insertInto('users').values({ id, email, name }).execute();
  return id;
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

function checkEmail(email: string): void {
  if (!EMAIL.test(email)) throw new OperatorError(`"${email}" is not an email address.`);
}

export interface CreatedOrganization {
  organization_id: string;
  user_id: string;
}

export async function createOrganization(db: Db, input: { name: string; ownerEmail: string; ownerName?: string | null }): Promise<CreatedOrganization> {
  checkEmail(input.ownerEmail);
  if (!input.name.trim()) throw new OperatorError('The organization needs a name.');
  return db.transaction().execute(async (trx) => {
    const userId = await findOrCreateUser(trx, input.ownerEmail, input.ownerName ?? null);
    const { orgId } = await createOrganizationWithOwner(trx, { name: input.name.trim(), ownerUserId: userId, via: 'creator' });
    await audit(trx, orgId, 'organization.created', 'organization', orgId, { name: input.name, owner_user_id: userId });
    return { organization_id: orgId, user_id: userId };
  });
}

export interface CreatedToken {
  token_id: string;
  api_token: string;
  organization_id: string;
  user_id: string;
  permissions: string[];
  expires_at: string | null;
}

export async function createToken(
  db: Db,
  input: { orgId: string; user: string; name: string; permissions: readonly string[] | 'all'; expiresInDays?: number | null },
): Promise<CreatedToken> {
  const permissions = input.permissions === 'all' ? [...PERMISSIONS] : [...input.permissions];
  const unknown = permissions.filter((p) => !(PERMISSIONS as readonly string[]).includes(p));
  if (unknown.length > 0) throw new OperatorError(`Unknown permission(s): ${unknown.join(', ')}. Known: ${PERMISSIONS.join(', ')}.`);
  if (permissions.length === 0) throw new OperatorError('A token needs at least one permission.');
  return db.transaction().execute(async (trx) => {
    const member = await trx
      .selectFrom('memberships as m')
      .innerJoin('users as u', 'u.id', 'm.user_id')
      .select(['m.user_id'])
      .where('m.org_id', '=', input.orgId)
      .where('m.status', '=', 'active')
      .where((eb) => (input.user.startsWith('usr_') ? eb('u.id', '=', input.user) : eb(eb.fn('lower', ['u.email']), '=', input.user.toLowerCase())))
      .executeTakeFirst();
    if (!member) throw new OperatorError(`${input.user} is not an active member of ${input.orgId}.`);
    const expiresAt = input.expiresInDays ? new Date(Date.now() + input.expiresInDays * 86_400_000) : null;
    const minted = await mintApiToken(trx, { orgId: input.orgId, userId: member.user_id, name: input.name, permissions, expiresAt });
    await audit(trx, input.orgId, 'api_token.created', 'api_token', minted.id, { name: input.name, user_id: member.user_id, permissions });
    return {
      token_id: minted.id,
      api_token: minted.token,
      organization_id: input.orgId,
      user_id: member.user_id,
      permissions: [...new Set(permissions)].sort(),
      expires_at: expiresAt?.toISOString() ?? null,
    };
  });
}

export async function revokeToken(db: Db, tokenId: string): Promise<{ token_id: string; organization_id: string }> {
  return db.transaction().execute(async (trx) => {
    const revoked = await revokeApiToken(trx, tokenId);
    if (!revoked) throw new OperatorError(`No active API token ${tokenId}.`);
    await audit(trx, revoked.org_id, 'api_token.revoked', 'api_token', tokenId, {});
    return { token_id: tokenId, organization_id: revoked.org_id };
  });
}

export interface BootstrapResult {
  created: boolean;
  base_url: string;
  organization_id: string;
  user_id: string;
  /** Present only when this call created it: tokens are stored hashed and cannot be shown again. */
  api_token: string | null;
}

const BOOTSTRAP_KEY = 'bootstrap';

/**
 * Idempotent: the first call creates an organization, its owner and an API token with every
 * permission; later calls return what the first one created (without the token).
 */
export async function bootstrap(db: Db, input: { baseUrl: string; email: string; organizationName: string }): Promise<BootstrapResult> {
  const done = await db.selectFrom('settings').select('value').where('key', '=', BOOTSTRAP_KEY).executeTakeFirst();
  if (done) {
    const value = done.value as { organization_id: string; user_id: string };
    return { created: false, base_url: input.baseUrl, organization_id: value.organization_id, user_id: value.user_id, api_token: null };
  }
  const org = await createOrganization(db, { name: input.organizationName, ownerEmail: input.email });
  const token = await createToken(db, { orgId: org.organization_id, user: org.user_id, name: 'bootstrap', permissions: 'all' });
  await db
    .insertInto('settings')
    .values({ key: BOOTSTRAP_KEY, value: JSON.stringify({ ...org, token_id: token.token_id }) })
    .onConflict((oc) => oc.column('key').doNothing())
    .execute();
  return { created: true, base_url: input.baseUrl, organization_id: org.organization_id, user_id: org.user_id, api_token: token.api_token };
}

/** Saves what a first bootstrap created where only the operator can read it. */
export function writeBootstrapFile(dataDir: string, result: BootstrapResult): string {
  const file = join(dataDir, 'bootstrap.json');
  const { base_url, organization_id, user_id, api_token } = result;
  writeFileSync(file, `${JSON.stringify({ base_url, organization_id, user_id, api_token }, null, 2)}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return file;
}
