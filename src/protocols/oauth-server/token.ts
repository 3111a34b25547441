import type { RequestContext } from '../../http/context';
import type { ProtocolInput, RawInput } from '../../http/handler-types';
import { hashSecret } from '../../lib/crypto';
import { grantStanding } from './authenticators';
import { ClientLookupError, findClient, secretMatches, type OAuthClient } from './clients';
import {
  auditGrant,
  issueTokens,
  mayRefresh,
  newRefreshToken,
  pkceMatches,
  REFRESH_GRACE_MS,
  REFRESH_PREFIX,
  resourceServerId,
  revokeGrant,
  scopesOf,
  scopeString,
  sealSuccessor,
  sweepExpired,
  successorContext,
} from './grants';
import { signingKeysOf, verifiedJwt } from './keys';

const NO_STORE = { 'Cache-Control': 'no-store', Pragma: 'no-cache' } as const;
const REALM = 'Basic realm="mcp-control-plane"';

type OAuthError = { status: 400 | 401; body: { error: string; error_description: string }; headers: Record<string, string> };
const oauthError = (error: string, description: string, status: 400 | 401 = 400, basic = false): OAuthError => ({
  status,
  body: { error, error_description: description },
  headers: { 'Cache-Control': 'no-store', ...(basic ? { 'WWW-Authenticate': REALM } : {}) },
});

/** The form as sent: one value per name; a repeated one is an `invalid_request` (RFC 6749 §3.2). */
function formOf(input: ProtocolInput<{ body: unknown }>): { values: Record<string, string | undefined>; repeated: string[] } {
  const body = (input.valid ? input.value.body : (input.raw as RawInput).body) as Record<string, unknown> | null;
  const values: Record<string, string | undefined> = {};
  const repeated: string[] = [];
  for (const [name, value] of Object.entries(body ?? {})) {
    if (Array.isArray(value)) repeated.push(name);
    else if (value !== undefined && value !== null) values[name] = String(value);
  }
  return { values, repeated };
}

/**
 * The client a token or revocation request comes from (RFC 6749 §2.3): HTTP Basic (the guard
 * checked it: the caller), or `client_id` (and `client_secret` for `client_secret_post`) in
 * the form, as the client registered. One method only.
 */
async function requestingClient(ctx: RequestContext, form: Record<string, string | undefined>): Promise<OAuthClient | OAuthError> {
  const caller = ctx.caller;
  if (caller?.kind === 'oauth_client') {
    if (form.client_secret !== undefined) return oauthError('invalid_request', 'Authenticate one way only: HTTP Basic or client_secret in the form, not both.');
    if (form.client_id !== undefined && form.client_id !== caller.clientId)
      return oauthError('invalid_client', 'client_id differs from the HTTP Basic client.', 401, true);
    const client = await findClient(ctx.db, caller.clientId, ctx.deps.config.outbound);
    if (!client) return oauthError('invalid_client', 'The client is unknown.', 401, true);
    if (client.info.token_endpoint_auth_method !== 'client_secret_basic') {
      return oauthError('invalid_client', `The client registered ${client.info.token_endpoint_auth_method}, not client_secret_basic.`, 401, true);
    }
    return client;
  }
  if (!form.client_id) return oauthError('invalid_client', 'Send client_id in the form (or HTTP Basic credentials for a confidential client).', 401);
  let client: OAuthClient | null;
  try {
    client = await findClient(ctx.db, form.client_id, ctx.deps.config.outbound);
  } catch (err) {
    if (err instanceof ClientLookupError) return oauthError('invalid_client', err.message, 401);
    throw err;
  }
  if (!client) return oauthError('invalid_client', 'The client is unknown.', 401);
  switch (client.info.token_endpoint_auth_method) {
    case 'none':
      return client;
    case 'client_secret_post':
      return form.client_secret !== undefined && secretMatches(client, form.client_secret)
        ? client
        : oauthError('invalid_client', 'The client secret does not match.', 401);
    case 'client_secret_basic':
      return oauthError('invalid_client', 'The client registered client_secret_basic: send its credentials with HTTP Basic.', 401, true);
  }
}

/** The token endpoint (RFC 6749 §3.2): codes and refresh tokens for tokens. */
export async function issueToken(input: ProtocolInput<{ body: unknown }>, ctx: RequestContext) {
  const { values: form, repeated } = formOf(input);
  if (repeated.length > 0) return oauthError('invalid_request', `${repeated.join(', ')} given more than once.`);
  const grantType = form.grant_type;
  if (!grantType) return oauthError('invalid_request', 'grant_type is required.');
  if (grantType !== 'authorization_code' && grantType !== 'refresh_token') {
    return oauthError('unsupported_grant_type', `grant_type ${grantType} is not supported; use authorization_code or refresh_token.`);
  }
  const client = await requestingClient(ctx, form);
  if ('status' in client) return client;
  if (!client.info.grant_types.includes(grantType)) return oauthError('unauthorized_client', `The client did not register the ${grantType} grant.`);
  await sweepExpired(ctx.db);
  return grantType === 'authorization_code' ? exchangeCode(form, client, ctx) : refresh(form, client, ctx);
}

/** What signing needs, read before any transaction (the embedded database has one connection). */
const signer = async (ctx: RequestContext) => ({ key: await signingKeysOf(ctx.deps).signing(), baseUrl: ctx.deps.config.baseUrl });

async function exchangeCode(form: Record<string, string | undefined>, client: OAuthClient, ctx: RequestContext) {
  if (!form.code) return oauthError('invalid_request', 'code is required.');
  if (!form.code_verifier) return oauthError('invalid_request', 'code_verifier is required (PKCE).');
  if (!/^[A-Za-z0-9._~-]{43,128}$/.test(form.code_verifier))
    return oauthError('invalid_request', 'code_verifier must be 43 to 128 unreserved characters (RFC 7636 §4.1).');
  const now = new Date();
  const codeHash = hashSecret(form.code);
  const code = await ctx.db
    .selectFrom('oauth_codes as c')
    .innerJoin('oauth_grants as g', 'g.id', 'c.grant_id')
    .select(['c.grant_id', 'c.redirect_uri', 'c.redirect_uri_named', 'c.code_challenge', 'c.scope', 'c.nonce', 'c.auth_time', 'c.expires_at', 'c.used_at'])
    .select(['g.client_id', 'g.user_id', 'g.mcp_server_id', 'g.org_id'])
    .where('c.code_hash', '=', codeHash)
    .executeTakeFirst();
  if (!code || code.client_id !== client.id) return oauthError('invalid_grant', 'The code is unknown, or was issued to another client.');
  if (code.used_at) {
    // A code presented twice was seen by someone else: what it issued is revoked (RFC 6749 §4.1.2).
    await ctx.personalWrite(async (db) => {
      await db.updateTable('oauth_access_tokens').set({ revoked_at: now }).where('code_hash', '=', codeHash).where('revoked_at', 'is', null).execute();
      await db.deleteFrom('oauth_refresh_tokens').where('code_hash', '=', codeHash).execute();
    });
    ctx.log.warn({ clientId: client.id, grantId: code.grant_id }, 'authorization code replayed; the tokens it issued are revoked');
    return oauthError('invalid_grant', 'The code was already used; the tokens issued for it are revoked.');
  }
  if (code.expires_at <= now) return oauthError('invalid_grant', 'The code expired (codes live 60 seconds).');
  if ((code.redirect_uri_named || form.redirect_uri !== undefined) && form.redirect_uri !== code.redirect_uri) {
    return oauthError('invalid_grant', 'redirect_uri differs from the authorization request’s.');
  }
  if (!pkceMatches(form.code_verifier, code.code_challenge)) return oauthError('invalid_grant', 'The code_verifier does not match the code_challenge.');
  if (form.resource !== undefined && resourceServerId(ctx.deps.config.baseUrl, form.resource) !== code.mcp_server_id) {
    return oauthError('invalid_target', 'The resource is not the MCP server this code was issued for.');
  }
  const standing = await grantStanding(ctx.db, code.grant_id, now);
  if (!standing.live) return oauthError('invalid_grant', standing.detail);
  const signing = await signer(ctx);
  const tokens = await ctx.personalWrite(async (db) => {
    const used = await db.updateTable('oauth_codes').set({ used_at: now }).where('code_hash', '=', codeHash).where('used_at', 'is', null).executeTakeFirst();
    if (Number(used.numUpdatedRows) === 0) return null;
    return issueTokens(
      db,
      signing,
      {
        grant: { id: code.grant_id, user_id: code.user_id, mcp_server_id: code.mcp_server_id },
        client,
        scope: code.scope,
        codeHash,
        refreshToken: 'new',
        idToken: { nonce: code.nonce, authTime: code.auth_time },
      },
      now,
    );
  });
  if (!tokens) return oauthError('invalid_grant', 'The code was already used.');
  return { status: 200 as const, headers: NO_STORE, body: tokens };
}

async function refresh(form: Record<string, string | undefined>, client: OAuthClient, ctx: RequestContext) {
  if (!form.refresh_token) return oauthError('invalid_request', 'refresh_token is required.');
  const now = new Date();
  const tokenHash = hashSecret(form.refresh_token);
  const stored = await ctx.db
    .selectFrom('oauth_refresh_tokens as r')
    .innerJoin('oauth_grants as g', 'g.id', 'r.grant_id')
    .select([
      'r.grant_id',
      'r.scope',
      'r.code_hash',
      'r.expires_at',
      'r.rotated_at',
      'r.successor_enc',
      'g.client_id',
      'g.user_id',
      'g.mcp_server_id',
      'g.org_id',
    ])
    .where('r.token_hash', '=', tokenHash)
    .executeTakeFirst();
  if (!stored || stored.client_id !== client.id) return oauthError('invalid_grant', 'The refresh token is unknown, revoked, or was issued to another client.');
  if (stored.expires_at <= now) return oauthError('invalid_grant', 'The refresh token expired (30 days without use).');
  const trace = ctx.trace;
  const actor = { type: 'mcp_client' as const, id: client.id, userId: stored.user_id };
  const requested = form.scope !== undefined ? scopesOf(form.scope) : scopesOf(stored.scope);
  if (requested.some((s) => !scopesOf(stored.scope).includes(s))) return oauthError('invalid_scope', 'scope may only narrow what was granted.');
  if (form.resource !== undefined && resourceServerId(ctx.deps.config.baseUrl, form.resource) !== stored.mcp_server_id) {
    return oauthError('invalid_target', 'The resource is not the MCP server this grant is for.');
  }
  const standing = await grantStanding(ctx.db, stored.grant_id, now);
  if (!standing.live) return oauthError('invalid_grant', standing.detail);
  const grant = { id: stored.grant_id, user_id: stored.user_id, mcp_server_id: stored.mcp_server_id };
  const scope = scopeString(requested);

  const signing = await signer(ctx);
  const answer = await ctx.personalWrite(async (db) => {
    // Rotate: only one request can take the token (a conditional update); a racing one finds it rotated.
    const successor = mayRefresh(client.info) ? await newRefreshToken(db, stored.grant_id, stored.scope, stored.code_hash, now) : null;
    const taken = await db
      .updateTable('oauth_refresh_tokens')
      .set({ rotated_at: now, successor_enc: successor ? sealSuccessor(ctx.deps.secrets, tokenHash, successor) : null })
      .where('token_hash', '=', tokenHash)
      .where('rotated_at', 'is', null)
      .executeTakeFirst();
    if (Number(taken.numUpdatedRows) === 1) {
      await auditGrant(db, { orgId: stored.org_id, action: 'oauth_grant.refreshed', grantId: stored.grant_id, actor, trace }, now);
      return issueTokens(
        db,
        signing,
        { grant, client, scope, codeHash: stored.code_hash, refreshToken: successor ? { reuse: successor } : 'none', idToken: null },
        now,
      );
    }
    if (successor) await db.deleteFrom('oauth_refresh_tokens').where('token_hash', '=', hashSecret(successor)).execute();
    const rotated = await db.selectFrom('oauth_refresh_tokens').select(['rotated_at', 'successor_enc']).where('token_hash', '=', tokenHash).executeTakeFirst();
    if (rotated?.rotated_at && now.getTime() - rotated.rotated_at.getTime() <= REFRESH_GRACE_MS) {
      // The same client's parallel sessions racing one refresh: the successor they will all share.
      const shared = rotated.successor_enc ? ctx.deps.secrets.open(rotated.successor_enc, successorContext(tokenHash)) : null;
      return issueTokens(
        db,
        signing,
        { grant, client, scope, codeHash: stored.code_hash, refreshToken: shared ? { reuse: shared } : 'none', idToken: null },
        now,
      );
    }
    // Presented again after the window: whoever holds it is not the client that rotated it (RFC 9700 §4.14.2).
    if (await revokeGrant(db, stored.grant_id, now)) {
      await auditGrant(
        db,
        { orgId: stored.org_id, action: 'oauth_grant.revoked', grantId: stored.grant_id, actor, changes: { reason: 'refresh_token_replayed' }, trace },
        now,
      );
    }
    return null;
  });
  if (!answer) {
    ctx.log.warn({ clientId: client.id, grantId: stored.grant_id }, 'rotated refresh token replayed; the grant is revoked');
    return oauthError('invalid_grant', 'The refresh token was already used; the grant is revoked. Authorize again.');
  }
  return { status: 200 as const, headers: NO_STORE, body: answer };
}

/**
 * Revocation (RFC 7009): an access token stops on its next use, a refresh token takes its
 * whole grant with it. 200 whatever the token was, so nothing is revealed; another client's
 * token is left alone.
 */
export async function revokeToken(input: ProtocolInput<{ body: unknown }>, ctx: RequestContext) {
  const { values: form, repeated } = formOf(input);
  if (repeated.length > 0) return oauthError('invalid_request', `${repeated.join(', ')} given more than once.`);
  const client = await requestingClient(ctx, form);
  if ('status' in client) return client;
  if (!form.token) return oauthError('invalid_request', 'The token parameter is missing.');
  const now = new Date();
  const token = form.token;
  if (token.startsWith(`${REFRESH_PREFIX}_`)) {
    const stored = await ctx.db
      .selectFrom('oauth_refresh_tokens as r')
      .innerJoin('oauth_grants as g', 'g.id', 'r.grant_id')
      .select(['g.id', 'g.client_id', 'g.org_id', 'g.user_id'])
      .where('r.token_hash', '=', hashSecret(token))
      .executeTakeFirst();
    if (stored && stored.client_id === client.id) {
      await ctx.personalWrite(async (db) => {
        if (await revokeGrant(db, stored.id, now)) {
          const actor = { type: 'mcp_client' as const, id: client.id, userId: stored.user_id };
          await auditGrant(
            db,
            { orgId: stored.org_id, action: 'oauth_grant.revoked', grantId: stored.id, actor, changes: { reason: 'revoked_by_client' }, trace: ctx.trace },
            now,
          );
        }
      });
    }
  } else {
    const claims = await verifiedJwt(ctx.db, token, 'at+jwt');
    if (claims && typeof claims.jti === 'string' && claims.client_id === client.id) {
      await ctx.personalWrite((db) =>
        db
          .updateTable('oauth_access_tokens')
          .set({ revoked_at: now })
          .where('jti', '=', claims.jti as string)
          .where('revoked_at', 'is', null)
          .execute(),
      );
    }
  }
  return { status: 200 as const, headers: { 'Cache-Control': 'no-store' } };
}
