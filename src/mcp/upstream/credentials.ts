import type { components } from '../../../generated/openapi';
import type { ResolvedConnector } from '../../areas/connectors';
import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import { listUpstreamTools, UpstreamRejected, UpstreamUnavailable, type UpstreamCredential, type UpstreamLimits, type UpstreamTool } from './client';
import { OAuthFailure, refreshTokens, type OAuthClientCredentials, type ProviderEndpoints, type TokenSet } from '../../protocols/oauth-client/client';
import {
  ConnectionRow,
  findConnection,
  findRefreshing,
  releaseRefreshLease,
  storeRefreshedCredentials,
  takeRefreshLease,
  updateConnection,
} from '../../areas/connections';

/**
 * A connection's credentials and how they reach the upstream: sealing, placing them as the
 * connector says, refreshing OAuth tokens (before expiry, and once on a 401), and marking the
 * connection `needs_reauth` when the upstream or the provider refuses them.
 */

export type ConnectionTool = components['schemas']['ConnectionTool'];
type OAuth2Auth = Extract<ResolvedConnector['auth'], { type: 'oauth2' }>;

/**
 * What using a connection's credentials needs of the request: a RequestContext has it; work
 * outside a request (the synthetic-tool runner for the MCP endpoint) brings its own.
 */
export type ConnectionContext = Pick<RequestContext, 'deps' | 'db' | 'systemWrite'>;

/**
 * What `credentials_enc` holds, sealed with the connection's id: the credential and the
 * origin it was obtained for (the connector's MCP URL when the key was checked or the tokens
 * issued), to which alone it is sent. Credentials sealed before the origin was kept have none.
 */
export type StoredCredentials = (
  | { type: 'api_key'; api_key: string }
  | {
      type: 'oauth2';
      access_token: string;
      refresh_token: string | null;
      expires_at: number | null;
      token_type: string;
      /** The origin of the token endpoint that issued them, where alone the refresh token is spent (absent in tokens stored before it was kept). */
      token_origin?: string;
    }
) & { origin?: string };

/** What `oauth_client_enc` holds: the provider found by discovery, and the client registered there for this connection. */
export interface StoredOAuthClient {
  endpoints: ProviderEndpoints | null;
  /** Registered by this server (RFC 7591) for `redirect_uri`; null when the connector brings its own client. */
  client: OAuthClientCredentials | null;
  redirect_uri: string;
}

export const credentialsContext = (id: string) => `connection:${id}`;
export const oauthClientContext = (id: string) => `connection-oauth:${id}`;
export const authorizeContext = (id: string) => `connection-authorize:${id}`;

/** Refresh an access token this long before it expires rather than send one about to lapse. */
const REFRESH_MARGIN_MS = 60_000;
/** The most an upstream's answers may weigh together in one exchange, and the most `tools/list` pages read. */
const UPSTREAM_MAX_BYTES = 8 * 1024 * 1024;
const UPSTREAM_MAX_PAGES = 50;

export function upstreamLimits(ctx: ConnectionContext): UpstreamLimits {
  const { outbound } = ctx.deps.config;
  return { policy: outbound, timeoutMs: outbound.timeoutMs, maxBytes: UPSTREAM_MAX_BYTES, maxPages: UPSTREAM_MAX_PAGES };
}

/** Seals credentials with the origin of `obtainedFor` (the MCP URL they were checked or issued for). */
export function sealCredentials(ctx: ConnectionContext, id: string, credentials: StoredCredentials, obtainedFor: string): string {
  return ctx.deps.secrets.seal(JSON.stringify({ ...credentials, origin: new URL(obtainedFor).origin }), credentialsContext(id));
}

/**
 * Whether credentials may be sent to `mcpUrl`: only to the origin they were obtained for.
 * The connector's URL can move while a connection, or what a replica remembers of it, still
 * holds credentials for the old place; those stay there. (Credentials stored before their
 * origin was kept go where the connector points, as they always did.)
 */
export function mayGoTo(credentials: StoredCredentials, mcpUrl: string): boolean {
  return credentials.origin === undefined || credentials.origin === new URL(mcpUrl).origin;
}

export const movedError = (id: string) =>
  needsReauthError(id, 'its credentials were obtained for another address than the one its connector now names; reconnect to use it there.');

/**
 * Credentials opened, by the row object they were read from: a row the MCP endpoint keeps
 * between calls (served-tools.ts) is opened once, not on every call. Held only as long as the
 * row itself, and only for the sealed value it was opened from.
 */
const opened = new WeakMap<object, { sealed: string; credentials: Readonly<StoredCredentials> }>();

export function openCredentials(ctx: ConnectionContext, row: { id: string; credentials_enc: string | null }): Readonly<StoredCredentials> | null {
  const sealed = row.credentials_enc;
  if (!sealed) return null;
  const known = opened.get(row);
  if (known?.sealed === sealed) return known.credentials;
  const credentials = Object.freeze(JSON.parse(ctx.deps.secrets.open(sealed, credentialsContext(row.id))) as StoredCredentials);
  opened.set(row, { sealed, credentials });
  return credentials;
}

export function openOAuthClient(ctx: ConnectionContext, row: { id: string; oauth_client_enc: string | null }): StoredOAuthClient | null {
  return row.oauth_client_enc ? (JSON.parse(ctx.deps.secrets.open(row.oauth_client_enc, oauthClientContext(row.id))) as StoredOAuthClient) : null;
}

/** The credential as the connector places it on every request. */
export function placeCredential(connector: ResolvedConnector, credentials: StoredCredentials | null): UpstreamCredential {
  if (!credentials) return { kind: 'none' };
  if (credentials.type === 'oauth2') return { kind: 'bearer', token: credentials.access_token };
  const { auth } = connector;
  if (auth.type !== 'api_key') return { kind: 'none' };
  return auth.placement === 'query'
    ? { kind: 'query', name: auth.name, value: credentials.api_key }
    : { kind: 'header', name: auth.name, value: `${auth.value_prefix ?? ''}${credentials.api_key}` };
}

/** The provider's endpoints and our client there: the connector's own settings first, then what discovery and registration found. */
export function providerOf(auth: OAuth2Auth, stored: StoredOAuthClient | null) {
  const endpoints = stored?.endpoints ?? null;
  const client: OAuthClientCredentials | null = auth.client_id
    ? { client_id: auth.client_id, client_secret: auth.client_secret, auth_method: auth.client_secret ? 'client_secret_post' : 'none' }
    : (stored?.client ?? null);
  return {
    issuer: auth.authorize_url && auth.token_url ? null : (endpoints?.issuer ?? null),
    authorization_endpoint: auth.authorize_url ?? endpoints?.authorization_endpoint ?? null,
    token_endpoint: auth.token_url ?? endpoints?.token_endpoint ?? null,
    revocation_endpoint: auth.revocation_url ?? endpoints?.revocation_endpoint ?? null,
    client,
  };
}

export function toTool(tool: UpstreamTool): ConnectionTool {
  const a = tool.annotations;
  const flag = (v: unknown) => (typeof v === 'boolean' ? v : null);
  return {
    name: tool.name,
    title: tool.title ?? (typeof a?.title === 'string' ? a.title : null),
    description: tool.description ?? null,
    input_schema: { ...tool.inputSchema, type: 'object' },
    output_schema: (tool.outputSchema as Record<string, unknown> | undefined) ?? null,
    annotations: a
      ? {
          read_only_hint: flag(a.readOnlyHint),
          destructive_hint: flag(a.destructiveHint),
          idempotent_hint: flag(a.idempotentHint),
          open_world_hint: flag(a.openWorldHint),
        }
      : null,
  };
}

export const unavailable = (err: UpstreamUnavailable | OAuthFailure) => new ApiError('upstream_unavailable', `${err.message} Nothing was changed.`);

/**
 * Tries credentials against the upstream before they are stored: MCP `initialize` and
 * `tools/list`. A refusal is 400 `upstream_credentials_rejected`, an unreachable upstream 502.
 */
export async function tryCredentials(ctx: RequestContext, connector: ResolvedConnector, credentials: StoredCredentials | null): Promise<ConnectionTool[]> {
  try {
    const tools = await listUpstreamTools(
      { url: connector.mcp_url, transport: connector.transport, credential: placeCredential(connector, credentials) },
      upstreamLimits(ctx),
      ctx.signal,
    );
    return tools.map(toTool);
  } catch (err) {
    if (err instanceof UpstreamRejected) {
      throw new ApiError(
        'upstream_credentials_rejected',
        `The upstream MCP server at ${connector.mcp_url} refused the credentials (HTTP ${err.status}); nothing was stored. Check the key and try again.`,
      );
    }
    if (err instanceof UpstreamUnavailable) {
      ctx.log.info({ connector: connector.slug, reason: err.detail }, 'upstream unavailable while checking credentials');
      throw unavailable(err);
    }
    throw err;
  }
}

export function eventConnection(row: ConnectionRow) {
  return { id: row.id, name: row.name, connector_slug: row.connector_slug, owner_user_id: row.owner_user_id, status: row.status };
}

export const needsReauthError = (id: string, why: string) =>
  new ApiError('connection_needs_reauth', `Connection ${id} cannot be used until its owner reconnects it (POST /connection/${id}/reconnect): ${why}`);

/**
 * The connection's credentials stopped working: `needs_reauth` with the reason, emitting
 * `connection.needs_reauth` unless it already was (a change the server makes, not the caller).
 */
export async function markNeedsReauth(
  ctx: ConnectionContext,
  row: ConnectionRow,
  reason: 'credentials_rejected' | 'refresh_failed',
  message: string,
): Promise<void> {
  await ctx.systemWrite(async (w) => {
    const current = await findConnection(w.db, row.org_id, row.id, true);
    if (!current) return;
    const already = current.status === 'needs_reauth';
    const updated = await updateConnection(w.db, row.org_id, row.id, {
      status: 'needs_reauth',
      status_reason: reason,
      ...(already ? {} : { status_changed_at: new Date() }),
      last_error: message,
    });
    if (updated && !already) w.emit('connection.needs_reauth', { connection: eventConnection(updated), reason: message });
  });
}

type OAuthTokens = Extract<StoredCredentials, { type: 'oauth2' }>;

/**
 * How long a refresher may hold a connection's refresh lease: the token request's own
 * deadline (the outbound timeout covers it from start to end) and room for the writes around
 * it. A lease left by a process that died ends by itself after that.
 */
const leaseMs = (ctx: ConnectionContext) => ctx.deps.config.outbound.timeoutMs + REFRESH_LEASE_MARGIN_MS;
const REFRESH_LEASE_MARGIN_MS = 5_000;
/** How often a refresher waiting for another one's lease looks at the connection again. */
const REFRESH_POLL_MS = 100;

/** What the stored connection says of the tokens `used`: take the stored ones, cannot be used, or spend its refresh token. */
type Seen = { kind: 'fresh'; tokens: OAuthTokens } | { kind: 'unusable'; why: string } | { kind: 'spend'; stored: OAuthTokens };

function see(ctx: ConnectionContext, current: ConnectionRow | undefined, used: OAuthTokens): Seen {
  if (!current) return { kind: 'unusable', why: 'it is deleted.' };
  if (current.status !== 'active') {
    // Made needs_reauth by a refusal of its refresh token (another refresher's, while this one waited): answered as that refusal was.
    const refused = current.status === 'needs_reauth' && current.status_reason === 'refresh_failed' && current.last_error;
    return { kind: 'unusable', why: refused ? refused : `it is ${current.status}.` };
  }
  const stored = openCredentials(ctx, current);
  if (stored?.type !== 'oauth2') return { kind: 'unusable', why: 'it holds no OAuth tokens.' };
  if (stored.access_token !== used.access_token) return { kind: 'fresh', tokens: stored };
  return { kind: 'spend', stored };
}

/**
 * New OAuth tokens in place of `used`, which stopped working or are about to. One refresh at
 * a time per connection, whichever replica asks: the refresher first takes the connection's
 * refresh lease (one atomic UPDATE, bounded in time), and only the holder spends the refresh
 * token. No transaction or connection is held while the provider answers: on the embedded
 * database every other query of the server would wait for the token endpoint, and on
 * PostgreSQL a slow provider would keep a pooled connection. The tokens are read again once
 * the lease is held, and a caller that finds it held polls the row until other tokens are
 * stored than the ones it used (it takes those) or the lease is given back or runs out (it
 * takes it in turn). Spending a refresh token a rotation already replaced would be refused
 * (invalid_grant) and leave a working connection `needs_reauth`. A refusal of the stored
 * refresh token makes the connection `needs_reauth` (409), and so answers those who waited.
 */
async function refresh(ctx: ConnectionContext, row: ConnectionRow, auth: OAuth2Auth, used: OAuthTokens, connectorUrl: string): Promise<OAuthTokens> {
  let taken = await takeRefreshLease(ctx.db, row.org_id, row.id, leaseMs(ctx));
  while (!taken) {
    await new Promise((resolve) => setTimeout(resolve, REFRESH_POLL_MS));
    const found = await findRefreshing(ctx.db, row.org_id, row.id);
    const seen = see(ctx, found?.row, used);
    if (seen.kind === 'fresh') return seen.tokens;
    if (seen.kind === 'unusable') throw needsReauthError(row.id, seen.why);
    if (found?.leaseFree) taken = await takeRefreshLease(ctx.db, row.org_id, row.id, leaseMs(ctx));
  }
  const { lease } = taken;
  let held = true;
  try {
    const seen = see(ctx, taken.row, used);
    if (seen.kind === 'fresh') return seen.tokens;
    if (seen.kind === 'unusable') throw needsReauthError(row.id, seen.why);
    const { stored } = seen;
    const provider = providerOf(auth, openOAuthClient(ctx, taken.row));
    if (!stored.refresh_token || !provider.token_endpoint || !provider.client) {
      return await refused(ctx, row, 'The access token expired and there is no refresh token to renew it.');
    }
    // The connector may name another token endpoint than the one that issued the refresh token (it moved): not sent there.
    if (stored.token_origin !== undefined && stored.token_origin !== new URL(provider.token_endpoint).origin) {
      throw needsReauthError(row.id, 'its tokens were issued by another token endpoint than the one its connector now names; reconnect to use it there.');
    }
    let next: TokenSet;
    try {
      next = await refreshTokens(
        { tokenEndpoint: provider.token_endpoint, client: provider.client, refreshToken: stored.refresh_token, resource: connectorUrl },
        { policy: ctx.deps.config.outbound, timeoutMs: ctx.deps.config.outbound.timeoutMs, maxBytes: UPSTREAM_MAX_BYTES },
      );
    } catch (err) {
      if (!(err instanceof OAuthFailure)) throw err;
      if (err.kind === 'unreachable') throw new UpstreamUnavailable(err.message, err.detail);
      // Refused; unless tokens were stored meanwhile (a reconnect, or a refresher that took the lease after ours ran out).
      const now = see(ctx, await findConnection(ctx.db, row.org_id, row.id), used);
      if (now.kind === 'fresh') return now.tokens;
      return await refused(ctx, row, err.message);
    }
    const tokens: OAuthTokens = {
      type: 'oauth2',
      access_token: next.access_token,
      refresh_token: next.refresh_token,
      expires_at: next.expires_at,
      token_type: next.token_type,
      token_origin: new URL(provider.token_endpoint).origin,
    };
    const sealed = sealCredentials(ctx, row.id, tokens, stored.origin ?? connectorUrl);
    if (await storeRefreshedCredentials(ctx.db, row.id, taken.row.credentials_enc, sealed, lease)) {
      held = false;
      // What this process remembers of the connection (the MCP endpoint's served tools) forgets the old tokens now.
      ctx.deps.afterCommit?.({ scope: row.org_id, tables: new Set(['connections']) });
    }
    // Not stored when other credentials were stored meanwhile: those stay, and these, as new, serve this call.
    return tokens;
  } finally {
    // Given back however this ended (the storing statement gave it back already). Should that
    // fail, the lease ends by itself: what this call found out stands.
    if (held) {
      await releaseRefreshLease(ctx.db, row.id, lease).catch((err: unknown) =>
        ctx.deps.logger.warn({ connection_id: row.id, err }, 'refresh lease not given back; it ends by itself'),
      );
    }
  }
}

/** The provider refused the stored refresh token (or there is none): `needs_reauth`, marked while the lease is still held so that whoever waits for it sees it. */
async function refused(ctx: ConnectionContext, row: ConnectionRow, message: string): Promise<never> {
  await markNeedsReauth(ctx, row, 'refresh_failed', message);
  throw needsReauthError(row.id, message);
}

/**
 * Runs `work` against the upstream with the connection's credentials: an OAuth access token
 * about to expire is refreshed first, and a 401/403 from the upstream refreshes once and
 * retries. Credentials the upstream still refuses make the connection `needs_reauth` (409).
 * UpstreamUnavailable passes through for the caller to decide.
 */
export async function withConnection<T>(
  ctx: ConnectionContext,
  row: ConnectionRow,
  connector: ResolvedConnector,
  work: (credential: UpstreamCredential) => Promise<T>,
): Promise<T> {
  if (row.status !== 'active') throw needsReauthError(row.id, `it is ${row.status}.`);
  let credentials = openCredentials(ctx, row);
  if (credentials && !mayGoTo(credentials, connector.mcp_url)) throw movedError(row.id);
  const auth = connector.auth;
  if (credentials?.type === 'oauth2' && auth.type === 'oauth2' && credentials.expires_at !== null && credentials.expires_at - Date.now() < REFRESH_MARGIN_MS) {
    credentials = await refresh(ctx, row, auth, credentials, connector.mcp_url);
  }
  try {
    return await work(placeCredential(connector, credentials));
  } catch (err) {
    if (!(err instanceof UpstreamRejected)) throw err;
    if (credentials?.type === 'oauth2' && auth.type === 'oauth2' && credentials.refresh_token) {
      // Refreshed only if the refused token is still the stored one; else the stored ones are tried.
      credentials = await refresh(ctx, row, auth, credentials, connector.mcp_url);
      try {
        return await work(placeCredential(connector, credentials));
      } catch (again) {
        if (!(again instanceof UpstreamRejected)) throw again;
      }
    }
    const message = `The upstream refused the connection's credentials (HTTP ${err.status}).`;
    await markNeedsReauth(ctx, row, 'credentials_rejected', message);
    throw needsReauthError(row.id, message);
  }
}
