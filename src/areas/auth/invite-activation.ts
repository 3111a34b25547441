import type { RequestContext } from '../../http/context';
import { isUniqueViolation } from '../../http/errors';
import type { OperationInput } from '../../http/handler-types';
import { factorsOf } from '../../identity/second-factors';
import { recordSecurityEvent } from '../../identity/security-events';
import { startSession } from '../../identity/sessions';
import { createUser, findUserByEmail } from '../../identity/users';
import { webAppPage } from '../../lib/web-app';
import { acceptInvite, peekInvite, type AcceptOutcome } from '../invites';
import { ssoRequired } from '../sso-connections';
import { signInFailed, webApp } from './sign-in';

/**
 * Where the browser goes once the invite is accepted: the organization, unless it requires a
 * second factor this session has not shown: then the second-factor page first (the person
 * holds one) or the security page to set one up (they hold none), back to the organization.
 */
async function landOnOrganization(ctx: RequestContext, orgId: string, who: { userId: string; secondFactorAt: Date | null }, cookie?: string) {
  const org = await ctx.db.selectFrom('organizations').select(['slug', 'require_mfa']).where('id', '=', orgId).executeTakeFirst();
  const orgPage = `/org/${encodeURIComponent(org?.slug ?? orgId)}`;
  let location = webAppPage(webApp(ctx), orgPage);
  if (org?.require_mfa && !who.secondFactorAt) {
    const factors = await factorsOf(ctx.db, who.userId);
    const page = new URL(webAppPage(webApp(ctx), factors.totp || factors.passkeys > 0 ? '/sign-in/second-factor' : '/account/security'));
    page.searchParams.set('return_to', orgPage);
    location = page.href;
  }
  const headers: { Location: string; 'Set-Cookie'?: string } = { Location: location };
  if (cookie) headers['Set-Cookie'] = cookie;
  return { status: 303 as const, headers };
}

async function accept(ctx: RequestContext, token: string, userId: string): Promise<AcceptOutcome> {
  const outcome = await acceptInvite(ctx.db, token, userId, ctx.trace);
  if (outcome.ok) {
    // A membership was made: remembered credentials are forgotten, as after any write.
    ctx.deps.afterCommit?.();
    if (outcome.joined) ctx.deps.onEvent?.(ctx.operationId, 'member.joined');
  }
  return outcome;
}

/** GET /auth/invite/activate?token=…, the emailed link: the invite page, or the reason it cannot be accepted. */
export async function activateInvite({ query }: OperationInput<'activateInvite'>, ctx: RequestContext) {
  const invite = await peekInvite(ctx.db, query.token);
  if (!invite.ok) return signInFailed(ctx, invite.reason);
  const page = new URL(webAppPage(webApp(ctx), '/invite/accept'));
  page.searchParams.set('token', query.token);
  return { status: 302 as const, headers: { Location: page.href } };
}

/**
 * POST /auth/invite/activate, the invite page's button. Signed in: accepts for the session's
 * person. Signed out: a new address gets its account and a session, then accepts; an address
 * with an account is sent to sign in first, with the invite page as `return_to`.
 */
export async function acceptInviteLink({ body }: OperationInput<'acceptInviteLink'>, ctx: RequestContext) {
  const token = body.token;
  const caller = ctx.caller;
  if (caller?.kind === 'session') {
    const outcome = await accept(ctx, token, caller.userId);
    return outcome.ok ? landOnOrganization(ctx, outcome.orgId, caller) : signInFailed(ctx, outcome.reason, 303 as const);
  }
  const invite = await peekInvite(ctx.db, token);
  if (!invite.ok) return signInFailed(ctx, invite.reason, 303 as const);
  const signInFirst = () => {
    const url = new URL(webAppPage(webApp(ctx), '/sign-in'));
    url.searchParams.set('return_to', `/invite/accept?token=${token}`);
    return { status: 303 as const, headers: { Location: url.href } };
  };
  if (await findUserByEmail(ctx.db, invite.email)) return signInFirst();
  // Where the organization of the address's domain enforces SSO, the person signs in there first.
  if (await ssoRequired(ctx.db, invite.email)) return signInFailed(ctx, 'sso_required', 303 as const);
  // The invite's link proves the address: the account is made and signed in.
  let userId: string;
  try {
    userId = await createUser(ctx.db, { email: invite.email });
  } catch (err) {
    // The same invite accepted twice at once: the other request made the account first.
    if (isUniqueViolation(err, 'users_email_key')) return signInFirst();
    throw err;
  }
  const session = await ctx.personalWrite((db) =>
    startSession(db, { userId, replacing: ctx.client.sessionCookie ?? null, ip: ctx.client.ip, userAgent: ctx.client.userAgent, method: 'invite' }),
  );
  const outcome = await accept(ctx, token, userId);
  if (!outcome.ok) return signInFailed(ctx, outcome.reason, 303 as const);
  await ctx.personalWrite((db) => recordSecurityEvent(db, { userId, type: 'signed_in', method: 'invite', client: ctx.trace }));
  return landOnOrganization(ctx, outcome.orgId, { userId, secondFactorAt: null }, session.cookie);
}
