import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql, type Kysely, type Transaction } from 'kysely';
import { mintApiToken, revokeApiToken } from './identity/api-tokens';
import { mintScimToken } from './identity/scim-tokens';
import { findOrCreateUser } from './identity/users';
import type { Db } from './db/database';
import type { Database } from './db/schema';
import { createOrganizationWithOwner } from './areas/organizations';
import { PERMISSIONS } from './identity/permissions';
import { newId } from './lib/ids';
import { isUniqueViolation } from './http/errors';
import { SecretBox } from './lib/crypto';
import type { SealedColumn } from './http/area';
import { insertAuditEntries } from './events/records';

/**
 * What the operator does from the command line (scripts/cli.ts) for what the API refuses to
 * tokens: the first organization, further organizations, and API tokens. Each change writes
 * an audit entry with the actor `operator`.
 */

export class OperatorError extends Error {
  override readonly name = 'OperatorError';
}

async function audit(trx: Transaction<Database>, orgId: string, action: string, targetType: string, targetId: string, changes: Record<string, unknown>) {
  await insertAuditEntries(trx, {
    id: newId('auditEvent'),
    org_id: orgId,
    actor_type: 'operator',
    actor_id: null,
    actor_user_id: null,
    action,
    target_type: targetType,
    target_id: targetId,
    changes: JSON.stringify(changes),
    ip: null,
    user_agent: null,
    request_id: null,
  });
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

function checkEmail(email: string): void {
  if (!EMAIL.test(email)) throw new OperatorError(`"${email}" is not an email address.`);
}

export interface CreatedOrganization {
  organization_id: string;
  user_id: string;
}

type OrganizationInput = { name: string; ownerEmail: string; ownerName?: string | null };

function checkOrganization(input: OrganizationInput): void {
  checkEmail(input.ownerEmail);
  if (!input.name.trim()) throw new OperatorError('The organization needs a name.');
}

async function createOrganizationIn(trx: Transaction<Database>, input: OrganizationInput): Promise<CreatedOrganization> {
  const userId = await findOrCreateUser(trx, input.ownerEmail, input.ownerName ?? null);
  const { orgId } = await createOrganizationWithOwner(trx, { name: input.name.trim(), ownerUserId: userId, via: 'creator' });
  await audit(trx, orgId, 'organization.created', 'organization', orgId, { name: input.name, owner_user_id: userId });
  return { organization_id: orgId, user_id: userId };
}

export async function createOrganization(db: Db, input: OrganizationInput): Promise<CreatedOrganization> {
  checkOrganization(input);
  return db.transaction().execute((trx) => createOrganizationIn(trx, input));
}

export interface CreatedToken {
  token_id: string;
  api_token: string;
  organization_id: string;
  user_id: string;
  permissions: string[];
  expires_at: string | null;
}

type TokenInput = { orgId: string; user: string; name: string; permissions: readonly string[] | 'all'; expiresInDays?: number | null };

function tokenPermissions(input: TokenInput): string[] {
  const permissions = input.permissions === 'all' ? [...PERMISSIONS] : [...input.permissions];
  const unknown = permissions.filter((p) => !(PERMISSIONS as readonly string[]).includes(p));
  if (unknown.length > 0) throw new OperatorError(`Unknown permission(s): ${unknown.join(', ')}. Known: ${PERMISSIONS.join(', ')}.`);
  if (permissions.length === 0) throw new OperatorError('A token needs at least one permission.');
  return permissions;
}

export async function createToken(db: Db, input: TokenInput): Promise<CreatedToken> {
  const permissions = tokenPermissions(input);
  return db.transaction().execute((trx) => createTokenIn(trx, input, permissions));
}

async function createTokenIn(trx: Transaction<Database>, input: TokenInput, permissions: string[]): Promise<CreatedToken> {
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
  const minted = await mintApiToken(trx, { orgId: input.orgId, userId: member.user_id, name: input.name, permissions, expiresAt }).catch((err) => {
    // A person's live tokens in one organization have distinct names.
    if (isUniqueViolation(err, 'api_tokens_owner_name_key'))
      throw new OperatorError(`${input.user} already has a token named "${input.name}" in ${input.orgId}; choose another --name or revoke that one.`);
    throw err;
  });
  await audit(trx, input.orgId, 'api_token.created', 'api_token', minted.id, { name: input.name, user_id: member.user_id, permissions });
  return {
    token_id: minted.id,
    api_token: minted.token,
    organization_id: input.orgId,
    user_id: member.user_id,
    permissions: [...new Set(permissions)].sort(),
    expires_at: expiresAt?.toISOString() ?? null,
  };
}

export async function revokeToken(db: Db, tokenId: string): Promise<{ token_id: string; organization_id: string }> {
  return db.transaction().execute(async (trx) => {
    const revoked = await revokeApiToken(trx, tokenId);
    if (!revoked) throw new OperatorError(`No active API token ${tokenId}.`);
    await audit(trx, revoked.org_id, 'api_token.revoked', 'api_token', tokenId, {});
    return { token_id: tokenId, organization_id: revoked.org_id };
  });
}

export interface CreatedScimToken {
  token_id: string;
  scim_token: string;
  organization_id: string;
  expires_at: string | null;
}

/**
 * A SCIM token for an organization's identity provider, for setup scripts that configure the
 * IdP without a person in the web app. The plan's `scim` feature is not checked: the operator
 * decides, as for organizations.
 */
export async function createScimToken(db: Db, input: { orgId: string; name: string; expiresInDays?: number | null }): Promise<CreatedScimToken> {
  if (!input.name.trim()) throw new OperatorError('The token needs a name.');
  return db.transaction().execute(async (trx) => {
    const org = await trx.selectFrom('organizations').select('id').where('id', '=', input.orgId).executeTakeFirst();
    if (!org) throw new OperatorError(`No organization ${input.orgId}.`);
    const expiresAt = input.expiresInDays ? new Date(Date.now() + input.expiresInDays * 86_400_000) : null;
    const minted = await mintScimToken(trx, { orgId: input.orgId, name: input.name, expiresAt, createdBy: null }).catch((err) => {
      if (isUniqueViolation(err, 'scim_tokens_org_id_name_key'))
        throw new OperatorError(`${input.orgId} already has a SCIM token named "${input.name}"; choose another --name or revoke that one.`);
      throw err;
    });
    await audit(trx, input.orgId, 'scim_token.created', 'scim_token', minted.id, { name: input.name, expires_at: expiresAt?.toISOString() ?? null });
    return { token_id: minted.id, scim_token: minted.token, organization_id: input.orgId, expires_at: expiresAt?.toISOString() ?? null };
  });
}

export interface BootstrapResult {
  created: boolean;
  base_url: string;
  organization_id: string;
  user_id: string;
  /** Present only when this call created it: tokens are stored hashed and cannot be shown again. */
  api_token: string | null;
  /** When that token stops working (null: never). */
  api_token_expires_at: string | null;
}

const BOOTSTRAP_KEY = 'bootstrap';
// Any constant shared by every process: the transaction-scoped advisory lock that serializes bootstraps.
const BOOTSTRAP_LOCK = 4_207_311;

/**
 * Idempotent, and safe when several replicas start at once on one empty database: in one
 * transaction, under an advisory lock, the first call creates an organization, its owner and
 * an API token with every permission; every later call returns what it created (without the
 * token). With `onlyIfEmpty` (the server's first start), a database that already has
 * organizations is left alone and null is returned.
 */
type BootstrapInput = { baseUrl: string; email: string; organizationName: string; tokenDays: number };
export async function bootstrap(db: Db, input: BootstrapInput): Promise<BootstrapResult>;
export async function bootstrap(db: Db, input: BootstrapInput & { onlyIfEmpty: true }): Promise<BootstrapResult | null>;
export async function bootstrap(db: Db, input: BootstrapInput & { onlyIfEmpty?: boolean }): Promise<BootstrapResult | null> {
  checkOrganization({ name: input.organizationName, ownerEmail: input.email });
  return db.transaction().execute(async (trx) => {
    await sql`select pg_advisory_xact_lock(${BOOTSTRAP_LOCK})`.execute(trx);
    const done = await trx.selectFrom('settings').select('value').where('key', '=', BOOTSTRAP_KEY).executeTakeFirst();
    if (done) {
      const value = done.value as { organization_id: string; user_id: string };
      return {
        created: false,
        base_url: input.baseUrl,
        organization_id: value.organization_id,
        user_id: value.user_id,
        api_token: null,
        api_token_expires_at: null,
      };
    }
    if (input.onlyIfEmpty && (await trx.selectFrom('organizations').select('id').limit(1).executeTakeFirst())) return null;
    const org = await createOrganizationIn(trx, { name: input.organizationName, ownerEmail: input.email });
    const token = await createTokenIn(
      trx,
      { orgId: org.organization_id, user: org.user_id, name: 'bootstrap', permissions: 'all', expiresInDays: input.tokenDays || null },
      [...PERMISSIONS],
    );
    await trx
      .insertInto('settings')
      .values({ key: BOOTSTRAP_KEY, value: JSON.stringify({ ...org, token_id: token.token_id }) })
      .execute();
    return {
      created: true,
      base_url: input.baseUrl,
      organization_id: org.organization_id,
      user_id: org.user_id,
      api_token: token.api_token,
      api_token_expires_at: token.expires_at,
    };
  });
}

/** Saves what a first bootstrap created where only the operator can read it. */
export function writeBootstrapFile(dataDir: string, result: BootstrapResult): string {
  // With DATABASE_URL nothing else has made DATA_DIR yet.
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = join(dataDir, 'bootstrap.json');
  const { base_url, organization_id, user_id, api_token, api_token_expires_at } = result;
  writeFileSync(file, `${JSON.stringify({ base_url, organization_id, user_id, api_token, api_token_expires_at }, null, 2)}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return file;
}

export interface ResealReport {
  /** Values moved to the current key. */
  resealed: number;
  /** Values sealed with the current key already. */
  current: number;
  /** `table.column#id` of values no configured key opens: they stay as they are. */
  unreadable: string[];
}

/**
 * Re-seals every stored secret with the current key, after a new key was put first in
 * ENCRYPTION_KEYS: what the areas declare as sealed columns, row by row, each in its own
 * small transaction. Safe to run again, and while the server runs.
 */
export async function resealSecrets(db: Db, secrets: SecretBox, columns: readonly SealedColumn[]): Promise<ResealReport> {
  const report: ResealReport = { resealed: 0, current: 0, unreadable: [] };
  const untyped = db as unknown as Kysely<any>;
  for (const { table, column, context, key = ['id'] } of columns) {
    const rows = (await untyped
      .selectFrom(table)
      .select([...key, column])
      .where(column, 'is not', null)
      .execute()) as Record<string, string>[];
    for (const row of rows) {
      const id = key.map((k) => row[k]).join(':');
      const sealed = row[column] as string;
      if (SecretBox.keyIdOf(sealed) === secrets.currentKeyId) {
        report.current += 1;
        continue;
      }
      let plain: string;
      try {
        plain = secrets.open(sealed, context(id));
      } catch {
        report.unreadable.push(`${table}.${column}#${id}`);
        continue;
      }
      // Conditional on the value read, so a concurrent change to the secret is never overwritten.
      let update = untyped
        .updateTable(table)
        .set({ [column]: secrets.seal(plain, context(id)) })
        .where(column, '=', sealed);
      for (const k of key) update = update.where(k, '=', row[k]);
      await update.execute();
      report.resealed += 1;
    }
  }
  return report;
}
