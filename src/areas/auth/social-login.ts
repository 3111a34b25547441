import { sql, type Transaction } from 'kysely';
import type { SocialProvider } from '../../config';
import type { Database } from '../../db/schema';
import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { OperationInput, ProtocolInput } from '../../http/handler-types';
import { refuseProblems } from '../../http/protocol';
import { createUser, findUserByEmail } from '../../identity/users';
import { authorizationUrl, exchangeCode, relyingParty, SocialLoginFailure, type SocialIdentity } from '../../protocols/social-login/oidc';
import { joinVerifiedDomains } from '../org-domains';
import { ssoRequired } from '../sso-connections';
import { flowCookie, flowFailed, flowOf, secretsOf, withClearedFlow } from './flow';
import { signIn, signInFailed } from './sign-in';

function providerOf(ctx: RequestContext, key: string): SocialProvider {
  const provider = ctx.deps.config.socialProviders.find((p) => p.key === key);
  if (!provider) throw new ApiError('not_found', `No social sign-in provider ${key} is configured; GET /auth/providers lists them.`);
  return provider;
}

const callbackUrl = (ctx: RequestContext, key: string) => `${ctx.deps.config.baseUrl}/auth/sso/${key}/callback`;

const outbound = (ctx: RequestContext) => ({ ...ctx.deps.config.outbound });

/** GET /auth/providers */
export async function listAuthProviders(_input: OperationInput<'listAuthProviders'>, ctx: RequestContext) {
  return {
    status: 200 as const,
    body: { data: ctx.deps.config.socialProviders.map((p) => ({ key: p.key, name: p.name, login_url: `/auth/sso/${p.key}` })) },
  };
}

/** GET /auth/sso/{provider}: to the provider, with the flow's secrets sealed in this browser's cookie. */
export async function startSocialLogin({ params, query }: OperationInput<'startSocialLogin'>, ctx: RequestContext) {
  const provider = providerOf(ctx, params.provider);
  let started: Awaited<ReturnType<typeof authorizationUrl>>;
  try {
    started = await authorizationUrl(await relyingParty(provider, outbound(ctx)), callbackUrl(ctx, provider.key), query.login_hint ?? null);
  } catch (err) {
    if (!(err instanceof SocialLoginFailure)) throw err;
    ctx.log.warn({ provider: provider.key, problem: err.detail }, 'social sign-in provider unavailable');
    return signInFailed(ctx, 'provider_error');
  }
  return {
    status: 302 as const,
    headers: { Location: started.url, 'Set-Cookie': flowCookie(ctx, { provider: provider.key, ...started.secrets, returnTo: query.return_to ?? null }) },
  };
}

/** GET /auth/sso/{provider}/callback */
export async function completeSocialLogin(input: ProtocolInput<OperationInput<'completeSocialLogin'>>, ctx: RequestContext) {
  if (!input.valid) refuseProblems('oidc', input.problems);
  const { params, query } = input.value;
  const provider = providerOf(ctx, params.provider);
  const flow = flowOf(ctx, provider.key);
  const secrets = flow && secretsOf(flow);
  // Checked before anything else the provider says: without this browser's own flow, the
  // answer may be an attacker's, replayed here to sign the victim in to the attacker's account.
  if (!flow || !secrets || typeof query.state !== 'string' || query.state !== secrets.state) return flowFailed(ctx, 'invalid_state');
  if (query.error !== undefined) {
    ctx.log.info({ provider: provider.key, error: query.error, description: query.error_description }, 'social sign-in provider answered an error');
    return flowFailed(ctx, query.error === 'access_denied' ? 'access_denied' : 'provider_error');
  }
  // The callback as the browser reached it, for openid-client's checks of `state`, `iss` and `code`.
  const current = new URL(callbackUrl(ctx, provider.key));
  for (const name of ['code', 'state', 'iss'] as const) {
    const value = query[name];
    if (value !== undefined) current.searchParams.set(name, value);
  }
  let identity: SocialIdentity;
  try {
    identity = await exchangeCode(await relyingParty(provider, outbound(ctx)), current, secrets);
  } catch (err) {
    if (!(err instanceof SocialLoginFailure)) throw err;
    ctx.log.warn({ provider: provider.key, problem: err.detail }, 'social sign-in refused');
    return flowFailed(ctx, 'provider_error');
  }
  // An address whose organization enforces its SSO connection signs in there, not here; asked
  // before any account is made for it.
  if (identity.email && (await ssoRequired(ctx.db, identity.email))) return flowFailed(ctx, 'sso_required');
  let joined = 0;
  const answer = await ctx.personalWrite(async (db) => {
    const account = await accountOf(db, provider.key, identity);
    if ('reason' in account) return flowFailed(ctx, account.reason);
    if (account.created) {
      // A first sign-in is a sign-up: the organizations that verified the email's domain take the person in.
      joined = (await joinVerifiedDomains(db, { id: account.userId, email: identity.email!, name: identity.name }, ctx.trace)).length;
    }
    const signedIn = await signIn(ctx, db, account.userId, flow.returnTo, provider.key);
    return withClearedFlow(signedIn);
  });
  for (let i = 0; i < joined; i += 1) ctx.deps.onEvent?.(ctx.operationId, 'member.joined');
  return answer;
}

/**
 * The account a provider's identity signs in to: the one linked to its subject; on a first
 * sign-in, a new account for the email the provider vouches for. An email that names an
 * existing account never links to it by itself (whoever controls an unverified or recycled
 * address at a provider would take the account over): the reason is returned instead.
 */
async function accountOf(
  db: Transaction<Database>,
  provider: string,
  identity: SocialIdentity,
): Promise<{ userId: string; created: boolean } | { reason: string }> {
  // Two callbacks of one person at once (two tabs, a double click) would both find no link
  // and both create the account: the second would fail on the unique email. One at a time.
  await sql`select pg_advisory_xact_lock(hashtext(${`social:${provider}:${identity.subject}`}))`.execute(db);
  const linked = await db
    .updateTable('social_identities')
    .set({ email: identity.email, last_sign_in_at: new Date() })
    .where('provider', '=', provider)
    .where('subject', '=', identity.subject)
    .returning('user_id')
    .executeTakeFirst();
  if (linked) return { userId: linked.user_id, created: false };
  if (!identity.email || !identity.emailVerified) return { reason: 'email_unverified' };
  if (await findUserByEmail(db, identity.email)) return { reason: 'account_not_linked' };
  const userId = await createUser(db, { email: identity.email, name: identity.name });
  await db
    .insertInto('social_identities')
    .values({ provider, subject: identity.subject, issuer: identity.issuer, user_id: userId, email: identity.email })
    .execute();
  return { userId, created: true };
}
