import type { RequestContext } from '../../http/context';
import type { FlowSecrets } from '../../protocols/social-login/oidc';
import { signInFailed } from './sign-in';

/**
 * The flow cookie of the browser sign-in flows that leave for an identity provider and come
 * back (social sign-in, SSO through OpenID Connect or SAML): only the browser that started a
 * sign-in may finish it, and within ten minutes. Sealed, so its secrets are neither read nor
 * forged.
 */
export const FLOW_COOKIE = 'cp_auth_flow';
export const FLOW_MS = 10 * 60_000;
export const CLEARED_FLOW_COOKIE = `${FLOW_COOKIE}=; Path=/auth; HttpOnly; Secure; SameSite=Lax; Max-Age=0`;

/** What the flow cookie holds: whose flow it is (a provider's key, an SSO connection's id), its secrets, where to land, and its end. */
export interface Flow extends Partial<FlowSecrets> {
  provider: string;
  returnTo: string | null;
  expiresAt: number;
  /** SAML: the request id whose answer this browser may bring back. */
  requestId?: string;
}

/**
 * The Set-Cookie starting a flow. `crossSite`: the identity provider comes back with a
 * cross-site POST (SAML's HTTP-POST binding), which a Lax cookie does not accompany; None lets
 * it, where the browser still sends third-party cookies.
 */
export function flowCookie(ctx: RequestContext, flow: Omit<Flow, 'expiresAt'>, crossSite = false): string {
  const sealed = ctx.deps.secrets.seal(JSON.stringify({ ...flow, expiresAt: Date.now() + FLOW_MS }), FLOW_COOKIE);
  return `${FLOW_COOKIE}=${sealed}; Path=/auth; HttpOnly; Secure; SameSite=${crossSite ? 'None' : 'Lax'}; Max-Age=${FLOW_MS / 1000}`;
}

/** The flow this browser started, if its cookie opens, is `provider`'s and is not over. */
export function flowOf(ctx: RequestContext, provider: string): Flow | null {
  const value = ctx.client.cookies
    ?.split(';')
    .map((part) => part.trim())
    .find((part) => part.startsWith(`${FLOW_COOKIE}=`))
    ?.slice(FLOW_COOKIE.length + 1);
  if (!value) return null;
  let flow: Flow;
  try {
    flow = JSON.parse(ctx.deps.secrets.open(value, FLOW_COOKIE)) as Flow;
  } catch {
    return null;
  }
  return flow.provider === provider && typeof flow.expiresAt === 'number' && flow.expiresAt > Date.now() ? flow : null;
}

/** A failed flow: to the sign-in page with the reason, the flow cookie cleared (it is used up). */
export function flowFailed(ctx: RequestContext, reason: string) {
  const answer = signInFailed(ctx, reason);
  return { ...answer, headers: { ...answer.headers, 'Set-Cookie': CLEARED_FLOW_COOKIE } };
}

/** The OAuth secrets of an OpenID Connect flow (a SAML flow has none). */
export function secretsOf(flow: Flow): FlowSecrets | null {
  const { state, nonce, verifier } = flow;
  return typeof state === 'string' && typeof nonce === 'string' && typeof verifier === 'string' ? { state, nonce, verifier } : null;
}

/** A flow's final answer, with the flow cookie cleared beside whatever cookie it sets (the session's). */
export function withClearedFlow<A extends { headers: { Location: string; 'Set-Cookie'?: string } }>(answer: A) {
  const cookies = answer.headers['Set-Cookie'] === undefined ? [] : [answer.headers['Set-Cookie']];
  return { ...answer, headers: { ...answer.headers, 'Set-Cookie': [...cookies, CLEARED_FLOW_COOKIE] } };
}
