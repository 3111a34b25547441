import { startSession } from '../../identity/sessions';
import { createUser, findUserByEmail } from '../../identity/users';
import type { RequestContext } from '../../http/context';
import { isUniqueViolation } from '../../http/errors';
import type { OperationInput } from '../../http/handler-types';
import { acceptInvite, peekInvite, type AcceptOutcome } from '../invites';
import { clientOf, signInFailed, webApp } from './sign-in';
import { recordSecurityEvent } from '../../identity/security-events';

async function landOnOrganization(ctx: RequestContext, orgId: string, cookie?: string) {
  const org = await ctx.db.selectFrom('organizations').select('slug').where('id', '=', orgId).executeTakeFirst();
  const headers: { Location: string; 'Set-Cookie'?: string } = { Location: `${webApp(ctx)}/org/${encodeURIComponent(org?.slug ?? orgId)}` };
  if (cookie) headers['Set-Cookie'] = cookie;
  return { status: 302 as const, headers };
}

async function accept(ctx: RequestContext, token: string, userId: string): Promise<AcceptOutcome> {
  const outcome = await acceptInvite(ctx.db, token, userId, { ip: ctx.client.ip, userAgent: ctx.client.userAgent, requestId: ctx.requestId });
  if (outcome.ok) {
    // A membership was made: remembered credentials are forgotten, as after any write.
    ctx.deps.afterCommit?.();
    if (outcome.joined) ctx.deps.onEvent?.(ctx.operationId, 'member.joined');
  }
  return outcome;
}

/**
 * GET /auth/invite/activate?token=…, the emailed link. Signed in: accepts for the session's
 * person. Signed out: a new address gets its account and a session, then accepts; an
 * address with an account is sent to sign in first, with this link as `return_to`.
 */
export async function activateInvite({ query }: OperationInput<'activateInvite'>, ctx: RequestContext) {
  const token = query.token;
  const caller = ctx.caller;
  if (caller?.kind === 'session') {
    const outcome = await accept(ctx, token, caller.userId);
    return outcome.ok ? landOnOrganization(ctx, outcome.orgId) : signInFailed(ctx, outcome.reason);
  }
  const invite = await peekInvite(ctx.db, token);
  if (!invite.ok) return signInFailed(ctx, invite.reason);
  const signInFirst = () => {
    const url = new URL(`${webApp(ctx)}/sign-in`);
    url.searchParams.set('return_to', `/auth/invite/activate?token=${token}`);
    return { status: 302 as const, headers: { Location: url.href } };
  };
  if (await findUserByEmail(ctx.db, invite.email)) return signInFirst();
  // Opening the link proves the address: the account is made and signed in.
  let userId: string;
  try {
    userId = await createUser(ctx.db, { email: invite.email });
  } catch (err) {
    // The same link opened twice at once: the other request made the account first.
    if (isUniqueViolation(err, 'users_email_key')) return signInFirst();
    throw err;
  }
  const session = await startSession(ctx.db, { userId, ip: ctx.client.ip, userAgent: ctx.client.userAgent });
  const outcome = await accept(ctx, token, userId);
  if (!outcome.ok) return signInFailed(ctx, outcome.reason);
  await ctx.personalWrite((db) => recordSecurityEvent(db, { userId, type: 'signed_in', method: 'invite', client: clientOf(ctx) }));
  return landOnOrganization(ctx, outcome.orgId, session.cookie);
}
