import type { Transaction } from 'kysely';
import type { Database } from '../../db/schema';
import type { RequestContext } from '../../http/context';
import { owesSecondFactor } from '../../identity/second-factors';
import { recordSecurityEvent } from '../../identity/security-events';
import { startSession } from '../../identity/sessions';
import { webAppPage } from '../../lib/web-app';

/** The web app's address: WEB_APP_URL, or this server (which serves its pages) when unset. */
export const webApp = (ctx: RequestContext): string => ctx.deps.config.webAppUrl ?? ctx.deps.config.baseUrl;

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
  method: string,
  status: S = 302 as S,
) {
  const pending = await owesSecondFactor(db, userId);
  await recordSecurityEvent(db, { userId, type: 'signed_in', method, client: ctx.trace });
  const session = await startSession(db, {
    userId,
    pending,
    replacing: ctx.client.sessionCookie ?? null,
    ip: ctx.client.ip,
    userAgent: ctx.client.userAgent,
  });
  const landing = webAppPage(webApp(ctx), returnTo);
  const next = pending ? new URL(webAppPage(webApp(ctx), '/sign-in/second-factor')) : null;
  if (next) next.searchParams.set('return_to', new URL(landing).pathname + new URL(landing).search);
  return { status, headers: { Location: next?.href ?? landing, 'Set-Cookie': session.cookie } };
}
