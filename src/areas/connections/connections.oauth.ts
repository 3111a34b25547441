import type { operations } from '../../../generated/openapi';
import { loadMemberAccess } from '../../identity/credentials';
import type { RequestContext } from '../../http/context';
import { ApiError, notFound } from '../../http/errors';
import { hashSecret } from '../../lib/crypto';
import {
  authorizationUrl,
  discoverProvider,
  exchangeCode,
  newState,
  OAuthFailure,
  pkcePair,
  registerClient,
  revokeToken,
  type OAuthClientCredentials,
  type ProviderEndpoints,
} from '../../protocols/oauth-client/client';
import type { OutboundLimits } from '../../outbound/client';
import { resolveConnector, type ResolvedConnector } from '../connectors';
import * as repo from './connections.repo';
import {
  authorizeContext,
  oauthClientContext,
  openCredentials,
  openOAuthClient,
  providerOf,
  sealCredentials,
  unavailable,
  type StoredCredentials,
  type StoredOAuthClient,
} from '../../mcp/upstream/credentials';

/**
 * The OAuth side of connections: starting an authorization (discovering the provider and
 * registering with it when the connector does not say), the callback that finishes it, and
 * revoking tokens when a connection is deleted.
 */

type OAuth2Auth = Extract<ResolvedConnector['auth'], { type: 'oauth2' }>;
type CallbackQuery = operations['handleConnectionCallback']['parameters']['query'];

/** How long an authorize_url works. */
export const AUTHORIZE_TTL_MS = 10 * 60 * 1000;
const OAUTH_MAX_BYTES = 256 * 1024;

/** What `authorize_enc` holds while an authorization is in progress. */
interface PendingAuthorization {
  user_id: string;
  verifier: string;
  authorize_url: string;
  return_to: string | null;
  scopes: string[];
  redirect_uri: string;
  /** The MCP URL the tokens are asked for (RFC 8707 `resource`); absent in authorizations started before it was kept. */
  resource?: string;
}

function oauthLimits(ctx: RequestContext): OutboundLimits {
  return { policy: ctx.deps.config.outbound, timeoutMs: ctx.deps.config.outbound.timeoutMs, maxBytes: OAUTH_MAX_BYTES };
}

export const redirectUriOf = (ctx: RequestContext, id: string) => `${ctx.deps.config.baseUrl}/connection/${id}/callback`;

/** The columns of a new authorization in progress, and the client kept for the connection. */
export interface StartedAuthorization {
  authorize_state_hash: string;
  authorize_enc: string;
  authorize_expires_at: Date;
  oauth_client_enc: string;
  scopes: string[];
}

/**
 * Prepares an authorization for connection `id`: the provider's endpoints (the connector's,
 * or discovered from the MCP URL), our client there (the connector's, or registered for this
 * connection's redirect URI), a fresh state and PKCE pair. Only discovery and registration
 * reach outside; nothing is sent with credentials. OAuth trouble is 502 upstream_unavailable.
 */
export async function startAuthorization(
  ctx: RequestContext,
  id: string,
  connector: ResolvedConnector & { auth: OAuth2Auth },
  stored: StoredOAuthClient | null,
  input: { scopes: string[] | undefined; returnTo: string | null; fallbackScopes: string[] },
): Promise<StartedAuthorization> {
  const { auth } = connector;
  const redirectUri = redirectUriOf(ctx, id);
  const limits = oauthLimits(ctx);
  try {
    let endpoints: ProviderEndpoints | null = stored?.endpoints ?? null;
    if (!endpoints && !(auth.authorize_url && auth.token_url)) endpoints = await discoverProvider(connector.mcp_url, limits);
    let registered: OAuthClientCredentials | null = stored && stored.redirect_uri === redirectUri ? stored.client : null;
    if (!auth.client_id && !registered) {
      endpoints ??= await discoverProvider(connector.mcp_url, limits);
      registered = await clientAt(ctx, endpoints, redirectUri, `MCP control plane: ${connector.name}`, limits);
    }
    const keep: StoredOAuthClient = { endpoints, client: auth.client_id ? null : registered, redirect_uri: redirectUri };
    const provider = providerOf(auth, keep);
    if (!provider.authorization_endpoint || !provider.client) throw new OAuthFailure('unreachable', null, 'The connector does not say where to authorize.');
    const scopes =
      input.scopes ?? (input.fallbackScopes.length > 0 ? input.fallbackScopes : auth.scopes.length > 0 ? auth.scopes : (endpoints?.scopes_supported ?? []));
    const state = newState();
    const pkce = pkcePair();
    const url = authorizationUrl({
      endpoint: provider.authorization_endpoint,
      clientId: provider.client.client_id,
      redirectUri,
      scopes,
      state,
      challenge: pkce.challenge,
      resource: connector.mcp_url,
    });
    const pending: PendingAuthorization = {
      user_id: ctx.user,
      verifier: pkce.verifier,
      authorize_url: url,
      return_to: input.returnTo,
      scopes,
      redirect_uri: redirectUri,
      resource: connector.mcp_url,
    };
    return {
      authorize_state_hash: hashSecret(state),
      authorize_enc: ctx.deps.secrets.seal(JSON.stringify(pending), authorizeContext(id)),
      authorize_expires_at: new Date(Date.now() + AUTHORIZE_TTL_MS),
      oauth_client_enc: ctx.deps.secrets.seal(JSON.stringify(keep), oauthClientContext(id)),
      scopes,
    };
  } catch (err) {
    if (!(err instanceof OAuthFailure)) throw err;
    ctx.log.info({ connector: connector.slug, reason: err.detail }, 'OAuth discovery or registration failed');
    throw unavailable(err);
  }
}

const REGISTRATION_WINDOW_MS = 60 * 60 * 1000;
const registrationContext = (issuer: string, redirectUri: string) => `oauth-registration:${issuer} ${redirectUri}`;

/**
 * Our client at the authorization server for `redirectUri`: the one registered there before
 * for the same redirect URI when there is one (a provider takes a client's redirect URIs as
 * registered, so that is the reuse it allows), else a new registration (RFC 7591), kept. New
 * registrations are limited per organization and hour (429 `rate_limited`): each is a client
 * at someone else's server, which an organization's members could otherwise create without
 * end by creating connections.
 */
async function clientAt(
  ctx: RequestContext,
  endpoints: ProviderEndpoints,
  redirectUri: string,
  clientName: string,
  limits: OutboundLimits,
): Promise<OAuthClientCredentials> {
  const issuer = endpoints.issuer ?? endpoints.registration_endpoint ?? endpoints.token_endpoint;
  const kept = await repo.findRegistration(ctx.db, issuer, redirectUri);
  if (kept && kept.org_id === ctx.orgId) {
    return JSON.parse(ctx.deps.secrets.open(kept.client_enc, registrationContext(issuer, redirectUri))) as OAuthClientCredentials;
  }
  const now = Date.now();
  const perHour = ctx.deps.config.oauthRegistrationsPerHour;
  const recent = await repo.registrationsSince(ctx.db, ctx.orgId, new Date(now - REGISTRATION_WINDOW_MS));
  if (recent.count >= perHour) {
    const seconds = Math.max(1, Math.ceil(((recent.oldest?.getTime() ?? now) + REGISTRATION_WINDOW_MS - now) / 1000));
    throw new ApiError(
      'rate_limited',
      `This organization's connections registered ${recent.count} new OAuth clients at authorization servers in the last hour, the most allowed; nothing was changed. Retry in ${seconds} seconds.`,
      { headers: { 'Retry-After': String(seconds) } },
    );
  }
  const client = await registerClient(endpoints, redirectUri, clientName, limits);
  await repo.saveRegistration(ctx.db, {
    issuer,
    redirect_uri: redirectUri,
    org_id: ctx.orgId,
    client_enc: ctx.deps.secrets.seal(JSON.stringify(client), registrationContext(issuer, redirectUri)),
  });
  return client;
}

/** The authorize URL of an authorization still in progress, for its owner; null otherwise. */
export function authorizeUrlOf(ctx: RequestContext, row: repo.ConnectionRow, now = new Date()): string | null {
  if (!row.authorize_enc || !row.authorize_expires_at || row.authorize_expires_at <= now) return null;
  return (JSON.parse(ctx.deps.secrets.open(row.authorize_enc, authorizeContext(row.id))) as PendingAuthorization).authorize_url;
}

// ---------------------------------------------------------------------------------------
// The callback
// ---------------------------------------------------------------------------------------

type Outcome =
  | { result: 'connected' }
  | { result: 'failed'; error: 'access_denied' | 'provider_error' | 'invalid_state' | 'token_exchange_failed'; providerError?: string; lastError: string };

/** Where the browser goes: `return_to` (a path) on the web app's address, with the outcome in the query. */
function redirectTo(ctx: RequestContext, id: string, returnTo: string | null, outcome: Outcome): string {
  const base = ctx.deps.config.webAppUrl ?? ctx.deps.config.baseUrl;
  const url = new URL(`${base}${returnTo ?? `/connections/${id}`}`);
  url.searchParams.set('connection_id', id);
  url.searchParams.set('result', outcome.result);
  if (outcome.result === 'failed') {
    url.searchParams.set('error', outcome.error);
    if (outcome.providerError) url.searchParams.set('provider_error', outcome.providerError);
  }
  return url.href;
}

/**
 * Finishes an authorization: the session's person must be an active member of the
 * connection's organization (else 404), with a second factor if it requires one, and its
 * owner. The state is taken once (cleared whatever follows); then `iss`, the provider's error
 * or the code exchange decide. Answers where the browser goes next.
 */
export async function handleCallback(ctx: RequestContext, id: string, query: CallbackQuery): Promise<string> {
  const caller = ctx.authenticated;
  if (caller.kind !== 'session') throw new ApiError('requires_person', 'The connect callback is for a person signed in to the web app.');
  const row = await repo.findConnectionAnywhere(ctx.db, id);
  const access = row ? await loadMemberAccess(ctx.db, caller.userId, row.org_id) : null;
  if (!row || !access) throw notFound('connection', id);
  if (access.requireMfa && !caller.secondFactorAt) {
    throw new ApiError(
      'mfa_setup_required',
      `Organization ${row.org_id} requires a second factor; verify one (POST /auth/mfa/verify) or enroll TOTP or a passkey first.`,
    );
  }
  if (row.owner_user_id !== caller.userId) {
    throw new ApiError('not_connection_owner', `Only the owner of connection ${id} can complete its authorization.`);
  }
  ctx.actIn(access);

  const claimed = await repo.claimAuthorization(ctx.db, id, hashSecret(query.state), new Date());
  const pending = claimed?.authorize_enc ? (JSON.parse(ctx.deps.secrets.open(claimed.authorize_enc, authorizeContext(id))) as PendingAuthorization) : null;
  const returnTo = pending?.return_to ?? null;
  const outcome =
    pending && pending.user_id === caller.userId
      ? await exchange(ctx, row, pending, claimed?.oauth_client_enc ?? null, query)
      : {
          result: 'failed' as const,
          error: 'invalid_state' as const,
          lastError: 'The authorization could not be completed: it was unknown, used, expired, or replaced by a newer one.',
        };
  if (outcome.result === 'failed') await repo.recordError(ctx.db, id, outcome.lastError);
  return redirectTo(ctx, id, returnTo, outcome);
}

async function exchange(
  ctx: RequestContext,
  row: repo.ConnectionRow,
  pending: PendingAuthorization,
  oauthClientEnc: string | null,
  query: CallbackQuery,
): Promise<Outcome> {
  const connector = await resolveConnector(
    ctx.db,
    ctx.deps.secrets,
    row.org_id,
    row.owner_user_id,
    ctx.org?.permissions.has('connector:manage') ?? false,
    row.connector_slug,
  );
  if (!connector || connector.auth.type !== 'oauth2') {
    return { result: 'failed', error: 'token_exchange_failed', lastError: 'The connector is no longer available, or no longer uses OAuth.' };
  }
  const stored = oauthClientEnc ? openOAuthClient(ctx, { id: row.id, oauth_client_enc: oauthClientEnc }) : null;
  const provider = providerOf(connector.auth, stored);
  if (query.iss !== undefined && provider.issuer !== null && query.iss !== provider.issuer) {
    return {
      result: 'failed',
      error: 'invalid_state',
      lastError: `The authorization response came from another issuer (${query.iss.slice(0, 200)}) than the one it was sent to.`,
    };
  }
  // RFC 9207 §2.4: a server that says it sends `iss` always does; a response without it may
  // come from another server the browser was sent to (a mix-up), whose code must not be spent here.
  if (query.iss === undefined && provider.issuer !== null && stored?.endpoints?.iss_parameter_supported === true) {
    return {
      result: 'failed',
      error: 'invalid_state',
      lastError: 'The authorization response did not name its issuer (iss), which its authorization server says it always does.',
    };
  }
  if (query.error !== undefined) {
    const described = query.error_description ? `: ${query.error_description.slice(0, 300)}` : '';
    return query.error === 'access_denied'
      ? { result: 'failed', error: 'access_denied', lastError: `The authorization was declined at the provider${described}.` }
      : { result: 'failed', error: 'provider_error', providerError: query.error, lastError: `The provider answered ${query.error}${described}.` };
  }
  const resource = pending.resource ?? connector.mcp_url;
  if (new URL(resource).origin !== new URL(connector.mcp_url).origin) {
    return {
      result: 'failed',
      error: 'token_exchange_failed',
      lastError: 'The connector now names another address than the one this authorization was started for; reconnect to authorize there.',
    };
  }
  if (query.code === undefined) {
    return { result: 'failed', error: 'provider_error', providerError: 'invalid_request', lastError: 'The provider sent neither a code nor an error.' };
  }
  if (!provider.token_endpoint || !provider.client) {
    return { result: 'failed', error: 'token_exchange_failed', lastError: 'The connector does not say where to exchange the code.' };
  }
  let tokens;
  try {
    tokens = await exchangeCode(
      {
        tokenEndpoint: provider.token_endpoint,
        client: provider.client,
        code: query.code,
        verifier: pending.verifier,
        redirectUri: pending.redirect_uri,
        resource,
      },
      oauthLimits(ctx),
    );
  } catch (err) {
    if (!(err instanceof OAuthFailure)) throw err;
    ctx.log.info({ connection_id: row.id, reason: err.detail }, 'token exchange failed');
    return { result: 'failed', error: 'token_exchange_failed', lastError: `The token exchange failed: ${err.message}` };
  }
  const credentials: StoredCredentials = {
    type: 'oauth2',
    access_token: tokens.access_token,
    refresh_token: tokens.refresh_token,
    expires_at: tokens.expires_at,
    token_type: tokens.token_type,
    token_origin: new URL(provider.token_endpoint).origin,
  };
  const scopes = tokens.scope ?? pending.scopes;
  await ctx.write(async (w) => {
    const current = await repo.findConnection(w.db, row.org_id, row.id, true);
    if (!current) return;
    await repo.updateConnection(w.db, row.org_id, row.id, {
      credentials_enc: sealCredentials(ctx, row.id, credentials, resource),
      oauth_client_enc: oauthClientEnc,
      scopes,
      status: 'active',
      status_reason: null,
      ...(current.status === 'active' ? {} : { status_changed_at: new Date() }),
      last_error: null,
    });
    await repo.forgetTools(w.db, row.id);
    w.audit({ targetId: row.id, changes: { status: 'active', scopes } });
  });
  return { result: 'connected' };
}

// ---------------------------------------------------------------------------------------
// Revocation
// ---------------------------------------------------------------------------------------

/**
 * Asks the provider to revoke a deleted connection's tokens (RFC 7009), refresh token first
 * (which ends the grant at most providers), then the access token. Best effort: logged.
 */
export async function revokeTokens(ctx: RequestContext, row: repo.ConnectionRow, connector: ResolvedConnector | null): Promise<void> {
  const credentials = openCredentials(ctx, row);
  if (credentials?.type !== 'oauth2') return;
  const stored = openOAuthClient(ctx, row);
  const auth: OAuth2Auth =
    connector?.auth.type === 'oauth2'
      ? connector.auth
      : { type: 'oauth2', authorize_url: null, token_url: null, revocation_url: null, scopes: [], client_id: null, client_secret: null, pkce: true };
  const provider = providerOf(auth, stored);
  if (!provider.revocation_endpoint || !provider.client) return;
  const tokens: Array<[string, 'refresh_token' | 'access_token']> = [
    ...(credentials.refresh_token ? [[credentials.refresh_token, 'refresh_token'] as [string, 'refresh_token']] : []),
    [credentials.access_token, 'access_token'],
  ];
  for (const [token, hint] of tokens) {
    const outcome = await revokeToken({ revocationEndpoint: provider.revocation_endpoint, client: provider.client, token, hint }, oauthLimits(ctx));
    if (!outcome.ok) ctx.log.info({ connection_id: row.id, hint, reason: outcome.detail }, 'token revocation failed');
  }
}
