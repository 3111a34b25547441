import { defineModule } from '../../http/area';
import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { OperationInput, ProtocolInput } from '../../http/handler-types';
import { refuseProblems } from '../../http/protocol';
import { flowCookie, flowFailed, flowOf, secretsOf, signIn, signInFailed, withClearedFlow } from '../../areas/auth';
import {
  connectionForEmail,
  emailDomain,
  oidcUrls,
  ssoAccount,
  usableConnection,
  clientSecretContext,
  type SsoConnectionRow,
} from '../../areas/sso-connections';
import { authorizationUrl, discoverRelyingParty, exchangeCode, SocialLoginFailure, type RelyingParty, type SocialIdentity } from '../social-login/oidc';

/**
 * Enterprise sign-in through an organization's OpenID Connect connection: the sign-in page
 * asks which connection an address belongs to (`resolveSsoConnection`, for SAML ones too),
 * then the browser goes to the identity provider and comes back to the callback. The relying
 * party is openid-client (PKCE S256, state, nonce; `iss`, audience, expiry and signature of
 * the ID token checked), as for social sign-in; the account and membership are the SSO
 * connections area's business.
 */

/** The flow cookie names the connection, so that a social provider's flow never finishes here. */
const flowKey = (connectionId: string) => `sso:${connectionId}`;

async function connectionOf(ctx: RequestContext, id: string): Promise<SsoConnectionRow> {
  const connection = await usableConnection(ctx.db, id, 'oidc');
  if (!connection) throw new ApiError('not_found', `No OpenID Connect SSO connection ${id} is turned on.`);
  return connection;
}

/** The connection as openid-client's relying party, discovered afresh (its settings may have changed since the last sign-in). */
function relyingPartyOf(ctx: RequestContext, connection: SsoConnectionRow): Promise<RelyingParty> {
  const secret = ctx.deps.secrets.open(connection.oidc_client_secret_enc as string, clientSecretContext(connection.id));
  return discoverRelyingParty(
    {
      key: connection.id,
      kind: 'oidc',
      name: connection.name,
      issuer: connection.oidc_issuer as string,
      apiUrl: null,
      clientId: connection.oidc_client_id as string,
      clientSecret: secret,
      scope: [...new Set(['openid', 'email', 'profile', ...(connection.oidc_scopes ?? [])])].join(' '),
    },
    ctx.deps.config.outbound,
  );
}

export default defineModule({
  name: 'OIDC sign-in',
  handlers: {
    /** GET /auth/oidc/resolve: from the address's domain only, never from accounts. */
    async resolveSsoConnection({ query }: OperationInput<'resolveSsoConnection'>, ctx: RequestContext) {
      const domain = emailDomain(query.email) ?? '';
      const connection = await connectionForEmail(ctx.db, query.email);
      if (!connection) return { status: 200, body: { email_domain: domain, connection_id: null, type: null, login_url: null, enforced: false } };
      const search = new URLSearchParams({ login_hint: query.email });
      if (query.return_to) search.set('return_to', query.return_to);
      return {
        status: 200,
        body: {
          email_domain: domain,
          connection_id: connection.id,
          type: connection.type,
          login_url: `/auth/${connection.type}/${connection.id}/login?${search.toString()}`,
          enforced: connection.enforce,
        },
      };
    },

    /** GET /auth/oidc/{connectionId}/login */
    async startOidcLogin({ params, query }: OperationInput<'startOidcLogin'>, ctx: RequestContext) {
      const connection = await connectionOf(ctx, params.connectionId);
      let started: Awaited<ReturnType<typeof authorizationUrl>>;
      try {
        started = await authorizationUrl(
          await relyingPartyOf(ctx, connection),
          oidcUrls(ctx.deps.config.baseUrl, connection.id).redirect_uri,
          query.login_hint ?? null,
        );
      } catch (err) {
        if (!(err instanceof SocialLoginFailure)) throw err;
        ctx.log.warn({ sso_connection_id: connection.id, problem: err.detail }, 'SSO identity provider unavailable');
        return signInFailed(ctx, 'provider_error');
      }
      return {
        status: 302,
        headers: {
          Location: started.url,
          'Set-Cookie': flowCookie(ctx, { provider: flowKey(connection.id), ...started.secrets, returnTo: query.return_to ?? null }),
        },
      };
    },

    /** GET /auth/oidc/{connectionId}/callback */
    async completeOidcLogin(input: ProtocolInput<OperationInput<'completeOidcLogin'>>, ctx: RequestContext) {
      if (!input.valid) refuseProblems('oidc', input.problems);
      const { params, query } = input.value;
      const connection = await connectionOf(ctx, params.connectionId);
      const flow = flowOf(ctx, flowKey(connection.id));
      const secrets = flow && secretsOf(flow);
      // This browser's own flow first: an answer replayed into another browser signs nobody in.
      if (!flow || !secrets || typeof query.state !== 'string' || query.state !== secrets.state) return flowFailed(ctx, 'invalid_state');
      if (query.error !== undefined) {
        ctx.log.info({ sso_connection_id: connection.id, error: query.error, description: query.error_description }, 'SSO identity provider answered an error');
        return flowFailed(ctx, query.error === 'access_denied' ? 'access_denied' : 'provider_error');
      }
      const redirectUri = oidcUrls(ctx.deps.config.baseUrl, connection.id).redirect_uri;
      const current = new URL(redirectUri);
      for (const name of ['code', 'state', 'iss'] as const) {
        const value = query[name];
        if (value !== undefined) current.searchParams.set(name, value);
      }
      let identity: SocialIdentity;
      try {
        identity = await exchangeCode(await relyingPartyOf(ctx, connection), current, secrets);
      } catch (err) {
        if (!(err instanceof SocialLoginFailure)) throw err;
        ctx.log.warn({ sso_connection_id: connection.id, problem: err.detail }, 'SSO sign-in refused');
        return flowFailed(ctx, 'provider_error');
      }
      let joined = false;
      const answer = await ctx.personalWrite(async (db) => {
        const outcome = await ssoAccount(db, connection, identity, ctx.trace);
        if ('reason' in outcome) return flowFailed(ctx, outcome.reason);
        joined = outcome.joined;
        const signedIn = await signIn(ctx, db, outcome.userId, flow.returnTo, { method: 'sso', ssoConnectionId: connection.id });
        return withClearedFlow(signedIn);
      });
      if (joined) ctx.deps.onEvent?.(ctx.operationId, 'member.joined');
      return answer;
    },
  },
});
