import type { SocialProvider } from '../../config';
import { OutboundRefused, OutboundSession, type OutboundPolicy } from '../../outbound/client';

/**
 * The server as an OpenID Connect relying party of social sign-in providers, through
 * openid-client: discovery, the authorization URL (PKCE S256, state, nonce), and the code
 * exchange, which checks the callback's `iss` (RFC 9207), the ID token's signature,
 * audience, issuer, expiry and nonce. Every request to the provider goes through the
 * outbound guard.
 */

// openid-client is published as ES modules only; this project compiles to CommonJS, where
// only a dynamic import reaches it.
type OpenId = typeof import('openid-client', { with: { 'resolution-mode': 'import' } });
type Configuration = import('openid-client', { with: { 'resolution-mode': 'import' } }).Configuration;
let openId: Promise<OpenId> | null = null;
const load = (): Promise<OpenId> => (openId ??= import('openid-client'));

/** What one answer from a provider may weigh: discovery documents, key sets and token answers are small. */
const ANSWER_CAP = 256 * 1024;

/** The provider could not be asked, or answered with an error or something that does not check. */
export class SocialLoginFailure extends Error {
  override readonly name = 'SocialLoginFailure';
  constructor(
    /** For the operator's log: what the provider did, never a token. */
    readonly detail: string,
  ) {
    super(detail);
  }
}

/**
 * A fetch for openid-client under the outbound guard: each request with its own deadline and
 * cap, its answer read whole (provider answers are small JSON) before the guard's session ends.
 */
function guardedFetch(policy: OutboundPolicy, timeoutMs: number) {
  return async (url: string, options: { body?: unknown; headers: Record<string, string>; method: string; signal?: AbortSignal }): Promise<Response> => {
    const session = new OutboundSession({ policy, timeoutMs, maxBytes: ANSWER_CAP }, options.signal);
    try {
      const response = await session.fetch(url, { method: options.method, headers: options.headers, body: options.body as RequestInit['body'] });
      const body = response.status === 204 || response.status === 304 ? null : await response.arrayBuffer();
      return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
    } finally {
      session.close();
    }
  };
}

export interface RelyingParty {
  provider: SocialProvider;
  config: Configuration;
  /** How the client authenticates at the token endpoint, chosen from the provider's metadata (null: a public client, or GitHub's fixed form). */
  tokenAuthMethod: 'client_secret_basic' | 'client_secret_post' | null;
}

/** Discovered providers, per configured provider (a failed discovery is tried again on the next sign-in). */
const discovered = new WeakMap<SocialProvider, Promise<RelyingParty>>();

/**
 * Discovers a provider afresh, without the per-process memory: an SSO connection's issuer is
 * checked when it is set, and its settings may change between sign-ins.
 */
export function discoverRelyingParty(provider: SocialProvider, outbound: OutboundPolicy & { timeoutMs: number }): Promise<RelyingParty> {
  return discover(provider, outbound);
}

/** The provider's configuration, from its discovery document (fetched once per process). */
export function relyingParty(provider: SocialProvider, outbound: OutboundPolicy & { timeoutMs: number }): Promise<RelyingParty> {
  let found = discovered.get(provider);
  if (!found) {
    found = discover(provider, outbound);
    discovered.set(provider, found);
    found.catch(() => discovered.delete(provider));
  }
  return found;
}

async function discover(provider: SocialProvider, outbound: OutboundPolicy & { timeoutMs: number }): Promise<RelyingParty> {
  const oidc = await load();
  const issuer = new URL(provider.issuer);
  const insecure = issuer.protocol === 'http:';
  if (provider.kind === 'github') {
    // GitHub publishes no discovery document: its endpoints are fixed under its web address.
    // It takes the client secret in the form (its documentation's way) and never sends `iss`.
    const config = new oidc.Configuration(
      {
        issuer: provider.issuer,
        authorization_endpoint: `${provider.issuer}/login/oauth/authorize`,
        token_endpoint: `${provider.issuer}/login/oauth/access_token`,
      },
      provider.clientId,
      undefined,
      oidc.ClientSecretPost(provider.clientSecret ?? ''),
    );
    config[oidc.customFetch] = guardedFetch(outbound, outbound.timeoutMs);
    if (insecure || new URL(provider.apiUrl ?? provider.issuer).protocol === 'http:') oidc.allowInsecureRequests(config);
    return { provider, config, tokenAuthMethod: 'client_secret_post' };
  }
  let config: Configuration;
  try {
    config = await oidc.discovery(
      issuer,
      provider.clientId,
      undefined,
      // The method is chosen once the provider's metadata is known (below); a public client has none.
      provider.clientSecret === null ? oidc.None() : undefined,
      {
        [oidc.customFetch]: guardedFetch(outbound, outbound.timeoutMs),
        // Configuration allows plain http only for an issuer on this machine (development, tests).
        ...(insecure ? { execute: [oidc.allowInsecureRequests] } : {}),
      },
    );
  } catch (err) {
    throw new SocialLoginFailure(`discovery of ${provider.issuer} failed: ${describe(err)}`);
  }
  let tokenAuthMethod: RelyingParty['tokenAuthMethod'] = null;
  if (provider.clientSecret !== null) {
    // Some providers accept only one of the two (IBM's only client_secret_basic): the one the
    // provider lists first wins; `client_secret_basic` is the standard's default when none is listed.
    const method = tokenAuthMethodOf(config.serverMetadata());
    tokenAuthMethod = method;
    const auth = method === 'client_secret_post' ? oidc.ClientSecretPost(provider.clientSecret) : oidc.ClientSecretBasic(provider.clientSecret);
    const metadata = config.serverMetadata();
    config = new oidc.Configuration(metadata, provider.clientId, undefined, auth);
    config[oidc.customFetch] = guardedFetch(outbound, outbound.timeoutMs);
    if (insecure) oidc.allowInsecureRequests(config);
  }
  return { provider, config, tokenAuthMethod };
}

/**
 * The client authentication a provider takes at its token endpoint: the first of the secret
 * methods it lists (IBM's only `client_secret_basic`, some only `client_secret_post`), or
 * `client_secret_basic`, the standard's default, when it lists none.
 */
export function tokenAuthMethodOf(metadata: { token_endpoint_auth_methods_supported?: string[] }): 'client_secret_basic' | 'client_secret_post' {
  const methods = metadata.token_endpoint_auth_methods_supported ?? ['client_secret_basic'];
  const found = methods.find((m) => m === 'client_secret_basic' || m === 'client_secret_post');
  return found === 'client_secret_post' ? 'client_secret_post' : 'client_secret_basic';
}

/** What a sign-in flow keeps in the browser's flow cookie to finish at the callback. */
export interface FlowSecrets {
  state: string;
  nonce: string;
  verifier: string;
}

/** The provider's authorization URL, and the flow's secrets to keep. */
export async function authorizationUrl(rp: RelyingParty, redirectUri: string, loginHint: string | null): Promise<{ url: string; secrets: FlowSecrets }> {
  const oidc = await load();
  const secrets = { state: oidc.randomState(), nonce: oidc.randomNonce(), verifier: oidc.randomPKCECodeVerifier() };
  const url = oidc.buildAuthorizationUrl(rp.config, {
    redirect_uri: redirectUri,
    scope: rp.provider.scope,
    state: secrets.state,
    nonce: secrets.nonce,
    code_challenge: await oidc.calculatePKCECodeChallenge(secrets.verifier),
    code_challenge_method: 'S256',
    ...(loginHint ? { login_hint: loginHint } : {}),
  });
  return { url: url.href, secrets };
}

/** Who the provider says signed in, from the checked ID token. */
export interface SocialIdentity {
  issuer: string;
  subject: string;
  email: string | null;
  /** Only `email_verified: true` counts: absent (Microsoft, many others) is not vouching. */
  emailVerified: boolean;
  name: string | null;
  /** Microsoft Entra's object id (`oid`), stable across its apps and also SCIM's `externalId`; null elsewhere. */
  objectId: string | null;
}

/**
 * Exchanges the callback's code: `callbackUrl` is the callback as the browser reached it
 * (its `code`, `state` and `iss`). openid-client checks `state`, `iss` (and requires it when
 * the provider says it sends it), then the ID token.
 */
export async function exchangeCode(rp: RelyingParty, callbackUrl: URL, secrets: FlowSecrets): Promise<SocialIdentity> {
  const oidc = await load();
  if (rp.provider.kind === 'github') return githubIdentity(oidc, rp, callbackUrl, secrets);
  let claims: ReturnType<Awaited<ReturnType<OpenId['authorizationCodeGrant']>>['claims']>;
  try {
    const tokens = await oidc.authorizationCodeGrant(rp.config, callbackUrl, {
      pkceCodeVerifier: secrets.verifier,
      expectedState: secrets.state,
      expectedNonce: secrets.nonce,
      idTokenExpected: true,
    });
    claims = tokens.claims();
  } catch (err) {
    throw new SocialLoginFailure(`${rp.provider.key}: ${describe(err)}`);
  }
  if (!claims || typeof claims.sub !== 'string' || claims.sub === '') throw new SocialLoginFailure(`${rp.provider.key}: the ID token names no subject`);
  const email = typeof claims.email === 'string' && claims.email.length <= 254 && claims.email.includes('@') ? claims.email : null;
  const name = typeof claims.name === 'string' ? claims.name.slice(0, 200) : null;
  const objectId = typeof claims.oid === 'string' && claims.oid !== '' ? claims.oid : null;
  return { issuer: claims.iss, subject: claims.sub, email, emailVerified: claims.email_verified === true, name, objectId };
}

/**
 * GitHub: the code exchanged (state and PKCE checked, no ID token), then who signed in from
 * its REST API: the numeric account id as the subject (the login can be renamed and reused),
 * and the email only if it is the account's primary one and GitHub verified it. The profile's
 * public `email` is whatever the person typed and is never used.
 */
async function githubIdentity(oidc: OpenId, rp: RelyingParty, callbackUrl: URL, secrets: FlowSecrets): Promise<SocialIdentity> {
  const api = rp.provider.apiUrl as string;
  try {
    const tokens = await oidc.authorizationCodeGrant(rp.config, callbackUrl, {
      pkceCodeVerifier: secrets.verifier,
      expectedState: secrets.state,
      idTokenExpected: false,
    });
    const read = async (path: string): Promise<unknown> => {
      const headers = new Headers({ accept: 'application/vnd.github+json', 'x-github-api-version': '2022-11-28' });
      const response = await oidc.fetchProtectedResource(rp.config, tokens.access_token, new URL(`${api}${path}`), 'GET', undefined, headers);
      if (response.status !== 200) throw new SocialLoginFailure(`github: ${path} answered ${response.status}`);
      return response.json();
    };
    const user = (await read('/user')) as { id?: unknown; login?: unknown; name?: unknown };
    if (typeof user.id !== 'number' && typeof user.id !== 'string') throw new SocialLoginFailure('github: /user names no account id');
    const emails = await read('/user/emails');
    const primary = Array.isArray(emails)
      ? (emails as { email?: unknown; primary?: unknown; verified?: unknown }[]).find((e) => e.primary === true && typeof e.email === 'string')
      : undefined;
    const email = typeof primary?.email === 'string' && primary.email.length <= 254 && primary.email.includes('@') ? primary.email : null;
    const name = typeof user.name === 'string' && user.name !== '' ? user.name : typeof user.login === 'string' ? user.login : null;
    return {
      issuer: rp.provider.issuer,
      subject: String(user.id),
      email,
      emailVerified: email !== null && primary?.verified === true,
      name: name?.slice(0, 200) ?? null,
      objectId: null,
    };
  } catch (err) {
    if (err instanceof SocialLoginFailure) throw err;
    throw new SocialLoginFailure(`github: ${describe(err)}`);
  }
}

/** An error from openid-client or the guard, for the log: its code and message, never a token. */
export function describe(err: unknown): string {
  if (err instanceof OutboundRefused) return err.detail;
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    const cause = (err as { cause?: unknown }).cause;
    const causeText =
      cause instanceof OutboundRefused
        ? `; ${cause.detail}`
        : cause instanceof Error
          ? `; ${cause.message}`
          : cause && typeof cause === 'object' && 'error' in cause
            ? `; ${String((cause as { error: unknown }).error)}`
            : '';
    return `${typeof code === 'string' ? `${code}: ` : ''}${err.message}${causeText}`.slice(0, 1000);
  }
  return String(err).slice(0, 1000);
}
