import type { RequestContext } from '../../http/context';
import type { OperationInput } from '../../http/handler-types';
import { consumeEmailLink, issueEmailLink, peekEmailLink } from '../../identity/email-links';
import { findUserByEmail } from '../../identity/users';
import { webAppPage } from '../../lib/web-app';
import { linkSent, refuseTooManyLinks, signIn, signInFailed, webApp } from './sign-in';

/** The link in the email: the server's public address, at the operation that opens it. */
const openLink = (ctx: RequestContext, token: string) => `${ctx.deps.config.baseUrl}/auth/magic-link/verify?token=${encodeURIComponent(token)}`;

export function sendSignInLink(ctx: RequestContext, to: string, token: string, expiresAt: Date): void {
  const text = [
    'Someone, hopefully you, asked to sign in to the MCP control plane with this address.',
    '',
    `Sign in: ${openLink(ctx, token)}`,
    '',
    `The link works once and until ${expiresAt.toISOString()}; asking for another one ends it. If you did not ask, ignore this email: nobody can sign in without opening it.`,
  ].join('\n');
  // Sent after the answer, whatever the outcome, so how long the answer takes says nothing
  // about whether the address has an account. Never the token in the log.
  ctx.deps.mailer.send({ to: [to], subject: 'Your sign-in link', text }).catch((err: unknown) => {
    ctx.log.warn({ err: (err as Error).message }, 'sign-in email not sent');
  });
}

/**
 * POST /auth/magic-link. The same answer, and the same work, whether or not the address has
 * an account: a link row is written either way (one for nobody can never be used), and only
 * an account's address gets the email.
 */
export async function requestMagicLink({ body }: OperationInput<'requestMagicLink'>, ctx: RequestContext) {
  const email = body.email;
  const now = new Date();
  await refuseTooManyLinks(ctx, email, ['sign_in'], 'Sign-in links', now);
  const user = await findUserByEmail(ctx.db, email);
  const link = await ctx.personalWrite((db) =>
    issueEmailLink(db, { purpose: 'sign_in', email, userId: user?.id ?? null, returnTo: body.return_to ?? null }, now),
  );
  if (user) sendSignInLink(ctx, user.email, link.token, link.expiresAt);
  return linkSent(ctx, '/sign-in', email, `If ${email} can use it, a link is on its way. It works once and expires in 15 minutes.`);
}

/** GET /auth/magic-link/verify: the emailed link. Uses nothing up (mail scanners open it too). */
export async function verifyMagicLink({ query }: OperationInput<'verifyMagicLink'>, ctx: RequestContext) {
  const state = await peekEmailLink(ctx.db, 'sign_in', query.token);
  if (!state.ok) return signInFailed(ctx, state.reason);
  const page = new URL(webAppPage(webApp(ctx), '/sign-in/confirm'));
  page.searchParams.set('token', query.token);
  return { status: 302 as const, headers: { Location: page.href } };
}

/** POST /auth/magic-link/verify: the confirmation page's button. */
export async function confirmMagicLink({ body }: OperationInput<'confirmMagicLink'>, ctx: RequestContext) {
  return ctx.personalWrite(async (db) => {
    const state = await consumeEmailLink(db, 'sign_in', body.token);
    if (!state.ok) return signInFailed(ctx, state.reason, 303 as const);
    const account = state.link.userId ?? (await findUserByEmail(db, state.link.email))?.id;
    if (!account) return signInFailed(ctx, 'link_invalid', 303 as const);
    return signIn(ctx, db, account, state.link.returnTo, 'magic_link', 303 as const);
  });
}
