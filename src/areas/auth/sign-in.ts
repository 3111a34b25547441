import type { Transaction } from 'kysely';
import type { Database } from '../../db/schema';
import type { RequestContext } from '../../http/context';
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
 * Whether a new session of this person starts `mfa_pending`: they hold a second factor and an
 * organization they are an active member of requires one. (Someone who holds none is let in,
 * and those organizations refuse them with 403 mfa_setup_required until they enroll one.)
 */
async function owesSecondFactor(db: Transaction<Database>, userId: string): Promise<boolean> {
  const row = await db
    .selectFrom('users as u')
    .select((eb) => [
      eb
        .or([eb('u.totp_enabled_at', 'is not', null), eb.exists(eb.selectFrom('passkeys as p').select('p.id').whereRef('p.user_id', '=', 'u.id'))])
        .as('has_factor'),
      eb
        .exists(
          eb
            .selectFrom('memberships as m')
            .innerJoin('organizations as o', 'o.id', 'm.org_id')
            .select('m.org_id')
            .whereRef('m.user_id', '=', 'u.id')
            .where('m.status', '=', 'active')
            .where('o.require_mfa', '=', true),
        )
        .as('required'),
    ])
    .where('u.id', '=', userId)
    .executeTakeFirst();
  return Boolean(row?.has_factor && row.required);
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
  status: S = 302 as S,
) {
  const pending = await owesSecondFactor(db, userId);
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
