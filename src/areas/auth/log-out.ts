import type { RequestContext } from '../../http/context';
import type { OperationInput } from '../../http/handler-types';
import { CLEARED_SESSION_COOKIE, endSession } from '../../identity/sessions';
import { webAppPage } from '../../lib/web-app';
import { webApp } from './sign-in';

/** POST /auth/logout: ends the caller's session only (their other browsers stay signed in). */
export async function logOut(_input: OperationInput<'logOut'>, ctx: RequestContext) {
  const caller = ctx.caller;
  // The guard admits only a session here (the operation is person-only, session-secured).
  if (caller?.kind === 'session') await ctx.personalWrite((db) => endSession(db, { id: caller.sessionId }));
  // A page's log-out button is a form: the browser navigates, so it is shown where to go next.
  if (ctx.client.accept?.includes('text/html')) {
    return { status: 303 as const, headers: { Location: webAppPage(webApp(ctx), '/sign-in'), 'Set-Cookie': CLEARED_SESSION_COOKIE } };
  }
  return { status: 204 as const, headers: { 'Set-Cookie': CLEARED_SESSION_COOKIE } };
}
