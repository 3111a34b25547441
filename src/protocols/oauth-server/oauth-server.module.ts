import type { RenderedError } from '../../http/area';
import { defineModule } from '../../http/area';
import { ApiError } from '../../http/errors';
import { hashSecret, randomSecret } from '../../lib/crypto';
import { newId } from '../../lib/ids';
import { oauthAccessTokenAuthenticator, oauthClientAuthenticator } from './authenticators';
import { consentPage, decideConsent, startAuthorization } from './authorize';
import { clientInformation, type ClientInformation } from './clients';
import { successorContext, sweepExpired } from './grants';
import { signingKeyContext } from './keys';
import { issueToken, revokeToken } from './token';

const BEARER_REALM = 'mcp-control-plane';
const USERINFO = new Set(['getOAuthUserInfo', 'postOAuthUserInfo']);
const CLIENT_AUTHENTICATED = new Set(['issueOAuthToken', 'revokeOAuthToken']);

// A header value is visible ASCII (RFC 6750 §3's error_description), without the quote that ends it.
const quoted = (text: string) =>
  text
    .replace(/[\u2018\u2019]/g, "'")
    .replace(/["\\]/g, "'")
    .replace(/[^\x20-\x7e]/g, '?');

/**
 * The OAuth authorization server MCP clients use (`/oauth/*`): registration (RFC 7591) or a
 * Client ID Metadata Document, authorization with PKCE and RFC 8707 resources, the consent
 * page, tokens with rotation, revocation (RFC 7009) and userinfo. Its access tokens are the
 * `mcpOAuth` scheme the MCP endpoint takes.
 */
export default defineModule({
  name: 'MCP OAuth server',
  authenticators: { mcpOAuth: oauthAccessTokenAuthenticator, oauthClient: oauthClientAuthenticator },
  pages: { '/oauth/consent': consentPage },
  sealed: [
    { table: 'oauth_signing_keys', column: 'private_jwk_enc', key: ['kid'], context: signingKeyContext },
    { table: 'oauth_refresh_tokens', column: 'successor_enc', key: ['token_hash'], context: successorContext },
  ],
  handlers: {
    async registerOAuthClient(input, ctx) {
      const body = (input.valid ? input.value.body : input.raw.body) as unknown;
      if (typeof body !== 'object' || body === null || Array.isArray(body)) {
        return { status: 400, body: { error: 'invalid_client_metadata', error_description: 'The body must be a JSON object of client metadata.' } };
      }
      if (!input.valid) {
        const redirect = input.problems.some((p) => p.pointer.startsWith('/redirect_uris'));
        const first = input.problems[0]!;
        return {
          status: 400,
          body: {
            error: redirect ? 'invalid_redirect_uri' : 'invalid_client_metadata',
            error_description: `${first.pointer.slice(1) || 'body'} ${first.message}.`,
          },
        };
      }
      const info = clientInformation(body as Record<string, unknown>);
      if ('error' in info) return { status: 400, body: info };
      const ip = ctx.client.ip;
      if (ip) {
        const recent = await ctx.db
          .selectFrom('oauth_clients')
          .select((eb) => eb.fn.countAll<string>().as('count'))
          .where('registered_ip', '=', ip)
          .where('created_at', '>', new Date(Date.now() - 3600_000))
          .executeTakeFirstOrThrow();
        // Open registration is a known abuse target: a bounded number per address and hour.
        const perHour = ctx.deps.config.mcpClientRegistrationsPerHour;
        if (Number(recent.count) >= perHour) {
          throw new ApiError('rate_limited', `At most ${perHour} client registrations an hour from one address.`, {
            headers: { 'Retry-After': '3600' },
          });
        }
      }
      await sweepExpired(ctx.db);
      const id = newId('oauthClient');
      const secret = info.token_endpoint_auth_method === 'none' ? null : randomSecret('ocs');
      const now = new Date();
      await ctx.personalWrite((db) =>
        db
          .insertInto('oauth_clients')
          .values({
            id,
            kind: 'registered',
            secret_hash: secret ? hashSecret(secret) : null,
            metadata: JSON.stringify(info),
            registered_ip: ip,
            created_at: now,
          })
          .execute(),
      );
      const answer: ClientInformation & { client_id: string; client_id_issued_at: number; client_secret?: string; client_secret_expires_at?: 0 } = {
        client_id: id,
        client_id_issued_at: Math.floor(now.getTime() / 1000),
        ...(secret ? { client_secret: secret, client_secret_expires_at: 0 as const } : {}),
        ...info,
      };
      return { status: 201, headers: { 'Cache-Control': 'no-store', Pragma: 'no-cache' }, body: answer };
    },
    startOAuthAuthorization: (input, ctx) => startAuthorization(input, ctx),
    issueOAuthToken: (input, ctx) => issueToken(input, ctx) as never,
    revokeOAuthToken: (input, ctx) => revokeToken(input, ctx) as never,
    getOAuthUserInfo: (_input, ctx) => userInfo(ctx),
    postOAuthUserInfo: (_input, ctx) => userInfo(ctx),
    decideOAuthConsent: ({ body }, ctx) => decideConsent(body, ctx),
  },
  renderError(error, operationId): RenderedError | null {
    if (USERINFO.has(operationId)) {
      // RFC 6750 §3: the challenge is authoritative; no error code when no token was sent.
      const code = error.status === 401 ? 'invalid_token' : error.status === 403 ? 'insufficient_scope' : error.status === 400 ? 'invalid_request' : null;
      if (!code) return null;
      const sent = !(error.status === 401 && error.code === 'unauthenticated');
      const challenge = sent
        ? `Bearer realm="${BEARER_REALM}", error="${code}", error_description="${quoted(error.detail)}"${code === 'insufficient_scope' ? ', scope="openid"' : ''}`
        : `Bearer realm="${BEARER_REALM}"`;
      return {
        status: error.status,
        contentType: 'application/json',
        body: { error: code, error_description: error.detail },
        headers: { 'WWW-Authenticate': challenge, 'Cache-Control': 'no-store' },
      };
    }
    if (CLIENT_AUTHENTICATED.has(operationId) && error.status === 401) {
      return {
        status: 401,
        contentType: 'application/json',
        body: { error: 'invalid_client', error_description: error.detail },
        headers: { 'WWW-Authenticate': 'Basic realm="mcp-control-plane"', 'Cache-Control': 'no-store' },
      };
    }
    return null;
  },
});

/** OpenID Connect Core §5.3: the claims the token's scopes allow; a claim the person does not have is left out. */
async function userInfo(ctx: Parameters<typeof decideConsent>[1]) {
  const caller = ctx.caller;
  if (!caller || caller.kind !== 'mcp_client' || caller.via !== 'oauth') throw new ApiError('invalid_token', 'Send an OAuth access token from /oauth/token.');
  const scopes = caller.scopes ?? [];
  if (!scopes.includes('openid')) throw new ApiError('insufficient_access', 'This endpoint needs the openid scope.');
  const user = await ctx.db.selectFrom('users').select(['id', 'name', 'email']).where('id', '=', caller.userId).executeTakeFirst();
  if (!user) throw new ApiError('invalid_token', 'The person this token was issued for no longer exists.');
  return {
    status: 200 as const,
    headers: { 'Cache-Control': 'no-store' },
    body: {
      sub: user.id,
      ...(scopes.includes('profile') && user.name ? { name: user.name } : {}),
      // Every account's address was proven by a link sent to it (or by a provider that verified it).
      ...(scopes.includes('email') ? { email: user.email, email_verified: true } : {}),
    },
  };
}
