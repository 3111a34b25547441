import { createHash, timingSafeEqual } from 'node:crypto';
import type { Executor } from '../../db/database';
import { hashSecret, randomSecret, type SecretBox } from '../../lib/crypto';
import { insertAuditEntries } from '../../events/records';
import { usersAtDomains } from '../../identity/users';
import { newId } from '../../lib/ids';
import type { ClientInformation, OAuthClient } from './clients';
import { signJwt, type SigningKey } from './keys';

/** How long each thing lives. */
export const ACCESS_TOKEN_SECONDS = 3600;
export const CODE_MS = 60_000;
export const AUTHORIZATION_REQUEST_MS = 10 * 60_000;
export const REFRESH_IDLE_MS = 30 * 24 * 3600_000;
export const GRANT_MS = 90 * 24 * 3600_000;
/**
 * A rotated refresh token presented again this soon after its rotation is a race between one
 * client's parallel sessions (Claude Code, Claude.ai and opencode sessions share one stored
 * token), not a theft: it gets a fresh access token and the successor it rotated into.
 */
export const REFRESH_GRACE_MS = 60_000;

export const CODE_PREFIX = 'oacd';
export const REFRESH_PREFIX = 'mcprt';

/** The MCP server id a `resource` names (RFC 8707): `{base_url}/mcp/{id}`, scheme and host in any case, nothing after. */
export function resourceServerId(baseUrl: string, resource: string): string | null {
  let url: URL;
  let base: URL;
  try {
    url = new URL(resource);
    base = new URL(baseUrl);
  } catch {
    return null;
  }
  if (url.origin !== base.origin || url.search || resource.includes('#') || url.username || url.password) return null;
  const match = /^\/mcp\/(mcp_[0-7][0-9a-hjkmnp-tv-z]{25})$/.exec(url.pathname);
  return match ? match[1]! : null;
}

export const resourceUrl = (baseUrl: string, mcpServerId: string) => `${baseUrl}/mcp/${mcpServerId}`;

/** PKCE S256 (RFC 7636 §4.6), compared in constant time. */
export function pkceMatches(verifier: string, challenge: string): boolean {
  const computed = Buffer.from(createHash('sha256').update(verifier).digest('base64url'));
  const expected = Buffer.from(challenge);
  return computed.length === expected.length && timingSafeEqual(computed, expected);
}

export const scopesOf = (scope: string): string[] => scope.split(' ').filter((s) => s !== '');
/** Scopes in one canonical order, so that equal sets read equal. */
export const scopeString = (scopes: Iterable<string>): string => [...new Set(scopes)].sort().join(' ');

/**
 * A live grant of the person, client and server, or undefined: not withdrawn, not expired, and
 * younger than the server's last token rotation (rotating an MCP server's token ends what was
 * granted on it).
 */
export function liveGrant(db: Executor, userId: string, mcpServerId: string, clientId: string, now = new Date()) {
  return db
    .selectFrom('oauth_grants as g')
    .innerJoin('mcp_servers as s', 's.id', 'g.mcp_server_id')
    .select(['g.id', 'g.org_id', 'g.scope', 'g.created_at', 'g.expires_at'])
    .where('g.user_id', '=', userId)
    .where('g.mcp_server_id', '=', mcpServerId)
    .where('g.client_id', '=', clientId)
    .where('g.revoked_at', 'is', null)
    .where('g.expires_at', '>', now)
    .where((eb) => eb.or([eb('s.token_rotated_at', 'is', null), eb('s.token_rotated_at', '<', eb.ref('g.created_at'))]))
    .executeTakeFirst();
}

export interface CodeRequest {
  grantId: string;
  clientId: string;
  redirectUri: string;
  redirectUriNamed: boolean;
  codeChallenge: string;
  scope: string;
  nonce: string | null;
  authTime: Date;
}

/** A single-use authorization code for the grant; only its hash is kept. */
export async function issueCode(db: Executor, request: CodeRequest, now = new Date()): Promise<string> {
  const code = randomSecret(CODE_PREFIX);
  await db
    .insertInto('oauth_codes')
    .values({
      code_hash: hashSecret(code),
      grant_id: request.grantId,
      redirect_uri: request.redirectUri,
      redirect_uri_named: request.redirectUriNamed,
      code_challenge: request.codeChallenge,
      scope: request.scope,
      nonce: request.nonce,
      auth_time: request.authTime,
      expires_at: new Date(now.getTime() + CODE_MS),
    })
    .execute();
  // A client that completed an authorization is kept (unused registrations are swept after 30 days).
  await db.updateTable('oauth_clients').set({ last_authorized_at: now }).where('id', '=', request.clientId).execute();
  return code;
}

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token?: string;
  scope: string;
  id_token?: string;
}

export interface Issuance {
  grant: { id: string; user_id: string; mcp_server_id: string };
  client: OAuthClient;
  scope: string;
  /** The code the tokens descend from: a replayed code revokes them. */
  codeHash: string | null;
  /** Only a new issuance from a code gets a new refresh token chain; a refresh passes its successor. */
  refreshToken: 'new' | 'none' | { reuse: string };
  idToken: { nonce: string | null; authTime: Date } | null;
}

/**
 * Signs (with a key read before the caller's transaction: one connection must not wait on
 * another) an access token for the grant (RFC 9068; its `jti` is stored, and checked on every use),
 * a refresh token when the client may refresh (stored hashed), and an ID token when `openid`
 * was granted.
 */
export async function issueTokens(db: Executor, deps: { key: SigningKey; baseUrl: string }, issuance: Issuance, now = new Date()): Promise<TokenResponse> {
  const { key } = deps;
  const jti = randomSecret('at').slice(3);
  const iat = Math.floor(now.getTime() / 1000);
  const exp = iat + ACCESS_TOKEN_SECONDS;
  await db
    .insertInto('oauth_access_tokens')
    .values({ jti, grant_id: issuance.grant.id, code_hash: issuance.codeHash, scope: issuance.scope, expires_at: new Date(exp * 1000) })
    .execute();
  const accessToken = signJwt(key, 'at+jwt', {
    iss: deps.baseUrl,
    sub: issuance.grant.user_id,
    aud: resourceUrl(deps.baseUrl, issuance.grant.mcp_server_id),
    client_id: issuance.client.id,
    scope: issuance.scope,
    jti,
    iat,
    exp,
  });
  const response: TokenResponse = { access_token: accessToken, token_type: 'Bearer', expires_in: ACCESS_TOKEN_SECONDS, scope: issuance.scope };
  if (issuance.refreshToken === 'new' && mayRefresh(issuance.client.info)) {
    response.refresh_token = await newRefreshToken(db, issuance.grant.id, issuance.scope, issuance.codeHash, now);
  } else if (typeof issuance.refreshToken === 'object') {
    response.refresh_token = issuance.refreshToken.reuse;
  }
  if (issuance.idToken && scopesOf(issuance.scope).includes('openid')) {
    response.id_token = signJwt(key, 'JWT', {
      iss: deps.baseUrl,
      sub: issuance.grant.user_id,
      aud: issuance.client.id,
      iat,
      exp,
      auth_time: Math.floor(issuance.idToken.authTime.getTime() / 1000),
      ...(issuance.idToken.nonce ? { nonce: issuance.idToken.nonce } : {}),
    });
  }
  await db.updateTable('oauth_grants').set({ last_used_at: now }).where('id', '=', issuance.grant.id).execute();
  return response;
}

export const mayRefresh = (info: ClientInformation) => info.grant_types.includes('refresh_token');

export async function newRefreshToken(db: Executor, grantId: string, scope: string, codeHash: string | null, now = new Date()): Promise<string> {
  const token = randomSecret(REFRESH_PREFIX);
  await db
    .insertInto('oauth_refresh_tokens')
    .values({ token_hash: hashSecret(token), grant_id: grantId, scope, code_hash: codeHash, expires_at: new Date(now.getTime() + REFRESH_IDLE_MS) })
    .execute();
  return token;
}

export const successorContext = (tokenHash: string) => `oauth-refresh-successor:${tokenHash}`;

/** Seals the successor of a rotated refresh token for the grace window. */
export function sealSuccessor(secrets: SecretBox, tokenHash: string, successor: string): string {
  return secrets.seal(successor, successorContext(tokenHash));
}

/** Revokes a whole grant: its access tokens stop on their next use, its refresh tokens and codes with it. */
export async function revokeGrant(db: Executor, grantId: string, now = new Date()): Promise<boolean> {
  const revoked = await db.updateTable('oauth_grants').set({ revoked_at: now }).where('id', '=', grantId).where('revoked_at', 'is', null).executeTakeFirst();
  await db.deleteFrom('oauth_refresh_tokens').where('grant_id', '=', grantId).execute();
  await db.deleteFrom('oauth_codes').where('grant_id', '=', grantId).execute();
  return Number(revoked.numUpdatedRows) > 0;
}

/**
 * Ends the live grants of people whose address is in `domains` that were not consented through
 * `connectionId` (SSO enforcement starting): their tokens stop at once, as their sessions do.
 * Returns how many ended.
 */
export async function revokeGrantsOutside(db: Executor, connectionId: string, domains: readonly string[], now = new Date()): Promise<number> {
  if (domains.length === 0) return 0;
  const ended = await db
    .updateTable('oauth_grants')
    .set({ revoked_at: now })
    .where('revoked_at', 'is', null)
    .where((eb) => eb.or([eb('sso_connection_id', 'is', null), eb('sso_connection_id', '!=', connectionId)]))
    .where('user_id', 'in', usersAtDomains(db, domains))
    .returning('id')
    .execute();
  const ids = ended.map((g) => g.id);
  if (ids.length > 0) {
    await db.deleteFrom('oauth_refresh_tokens').where('grant_id', 'in', ids).execute();
    await db.deleteFrom('oauth_codes').where('grant_id', 'in', ids).execute();
  }
  return ids.length;
}

/** Records a change to a grant in its MCP server's organization's audit log (in the caller's transaction). */
export async function auditGrant(
  db: Executor,
  entry: {
    orgId: string;
    action: 'oauth_grant.created' | 'oauth_grant.refreshed' | 'oauth_grant.revoked';
    grantId: string;
    actor: { type: 'user' | 'mcp_client'; id: string; userId: string | null };
    changes?: Record<string, unknown>;
    trace: { ip: string | null; userAgent: string | null; requestId: string };
  },
  now = new Date(),
): Promise<void> {
  await insertAuditEntries(db, {
    id: newId('auditEvent'),
    org_id: entry.orgId,
    actor_type: entry.actor.type,
    actor_id: entry.actor.id,
    actor_user_id: entry.actor.userId,
    action: entry.action,
    target_type: 'oauth_grant',
    target_id: entry.grantId,
    changes: JSON.stringify(entry.changes ?? {}),
    ip: entry.trace.ip,
    user_agent: entry.trace.userAgent,
    request_id: entry.trace.requestId,
    created_at: now,
  });
}

/** Registrations never used to complete an authorization are deleted after this long. */
export const UNUSED_CLIENT_MS = 30 * 24 * 3600_000;
const SWEEP_BATCH = 200;

/**
 * Deletes a bounded batch of what can no longer be used: expired authorization requests,
 * codes and access tokens, refresh tokens past their life, grants withdrawn or expired a day
 * ago (their tokens go with them), and registrations never used within 30 days. Run
 * opportunistically by the endpoints that add rows, so the tables stay the size of what is
 * live without a scheduler.
 */
export async function sweepExpired(db: Executor, now = new Date()): Promise<void> {
  const dayAgo = new Date(now.getTime() - 24 * 3600_000);
  await db
    .deleteFrom('oauth_authorization_requests')
    .where('id', 'in', (eb) => eb.selectFrom('oauth_authorization_requests').select('id').where('expires_at', '<', now).limit(SWEEP_BATCH))
    .execute();
  await db
    .deleteFrom('oauth_codes')
    .where('code_hash', 'in', (eb) => eb.selectFrom('oauth_codes').select('code_hash').where('expires_at', '<', dayAgo).limit(SWEEP_BATCH))
    .execute();
  await db
    .deleteFrom('oauth_access_tokens')
    .where('jti', 'in', (eb) => eb.selectFrom('oauth_access_tokens').select('jti').where('expires_at', '<', dayAgo).limit(SWEEP_BATCH))
    .execute();
  await db
    .deleteFrom('oauth_refresh_tokens')
    .where('token_hash', 'in', (eb) => eb.selectFrom('oauth_refresh_tokens').select('token_hash').where('expires_at', '<', now).limit(SWEEP_BATCH))
    .execute();
  await db
    .deleteFrom('oauth_grants')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('oauth_grants')
        .select('id')
        .where((w) => w.or([w('revoked_at', '<', dayAgo), w('expires_at', '<', dayAgo)]))
        .limit(SWEEP_BATCH),
    )
    .execute();
  await db
    .deleteFrom('oauth_clients')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('oauth_clients')
        .select('id')
        .where('kind', '=', 'registered')
        .where('last_authorized_at', 'is', null)
        .where('created_at', '<', new Date(now.getTime() - UNUSED_CLIENT_MS))
        .limit(SWEEP_BATCH),
    )
    .execute();
}
