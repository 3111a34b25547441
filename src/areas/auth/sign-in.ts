import type { Transaction } from 'kysely';
import type { Database } from '../../db/schema';
import type { RequestContext } from '../../http/context';
import { owesSecondFactor } from '../../identity/second-factors';
import { recordSecurityEvent } from '../../identity/security-events';
import { startSession } from '../../identity/sessions';
import { webAppPage } from '../../lib/web-app';
import { ApiError } from '../../http/errors';
import { ssoRequired } from '../sso-connections';
import { LINK_WINDOW_MS, LINKS_PER_WINDOW, linksRequestedSince, type EmailLinkPurpose } from '../../identity/email-links';

/** The web app's address: WEB_APP_URL, or this server (which serves its pages) when unset. */
export const webApp = (ctx: RequestContext): string => ctx.deps.config.webAppUrl ?? ctx.deps.config.baseUrl;

/** Whether the request is a form a web app page posted (it is answered with a page to go to, not JSON). */
export const postedByPage = (ctx: RequestContext): boolean => ctx.client.media === 'application/x-www-form-urlencoded';

/** 429 when the address was sent LINKS_PER_WINDOW links of these purposes lately; `what` names them. */
export async function refuseTooManyLinks(ctx: RequestContext, email: string, purposes: readonly EmailLinkPurpose[], what: string, now: Date): Promise<void> {
  if ((await linksRequestedSince(ctx.db, purposes, email, new Date(now.getTime() - LINK_WINDOW_MS))) < LINKS_PER_WINDOW) return;
  throw new ApiError(
    'rate_limited',
    `${what} for this address were asked for ${LINKS_PER_WINDOW} times in 15 minutes; use the newest one or try again later.`,
    {
      headers: { 'Retry-After': String(LINK_WINDOW_MS / 1000) },
    },
  );
}

/**
 * The answer to a request for an emailed link, the same whatever became of the address: 202
 * with `message`, or, to a page's form, 303 back to that page saying a link was sent.
 */
export function linkSent(ctx: RequestContext, page: string, email: string, message: string) {
  if (postedByPage(ctx)) {
    const location = new URL(webAppPage(webApp(ctx), page));
    location.searchParams.set('sent', email);
    return { status: 303 as const, headers: { Location: location.href } };
  }
  return { status: 202 as const, body: { email, message } };
}

/** The sign-in page with the reason a flow failed (SignInLocation lists them). */
export function signInFailed<S extends 302 | 303 = 302>(ctx: RequestContext, reason: string, status: S = 302 as S) {
  const url = new URL(webAppPage(webApp(ctx), '/sign-in'));
  url.searchParams.set('error', reason);
  return { status, headers: { Location: url.href } };
}

/**
 * Ends a sign-in flow with a session for `userId`: the browser's earlier session ends, the
 * new one starts `mfa_pending` when a second factor is owed (and goes to the second-factor
 * page first), and the answer carries the cookie and where the browser goes next.
 */
export async function signIn<S extends 302 | 303 = 302>(
  ctx: RequestContext,
  db: Transaction<Database>,
  userId: string,
  returnTo: string | null,
  how: string | { method: 'sso'; ssoConnectionId: string },
  status: S = 302 as S,
) {
  // The session keeps how it began: enforcing an SSO connection ends the ones that did not come through it.
  const { method, ssoConnectionId } = typeof how === 'string' ? { method: how, ssoConnectionId: null } : how;
  if (ssoConnectionId === null) {
    // The other ways in close for an address whose organization enforces its SSO connection.
    const user = await db.selectFrom('users').select('email').where('id', '=', userId).executeTakeFirst();
    if (user && (await ssoRequired(db, user.email))) return signInFailed(ctx, 'sso_required', status);
  }
  const pending = await owesSecondFactor(db, userId);
  await recordSecurityEvent(db, { userId, type: 'signed_in', method, client: ctx.trace });
  const session = await startSession(db, {
    userId,
    pending,
    replacing: ctx.client.sessionCookie ?? null,
    ip: ctx.client.ip,
    userAgent: ctx.client.userAgent,
    method,
    ssoConnectionId,
  });
  const landing = webAppPage(webApp(ctx), returnTo);
  const next = pending ? new URL(webAppPage(webApp(ctx), '/sign-in/second-factor')) : null;
  if (next) next.searchParams.set('return_to', new URL(landing).pathname + new URL(landing).search);
  return { status, headers: { Location: next?.href ?? landing, 'Set-Cookie': session.cookie } };
}
