import type { RequestContext } from '../../http/context';
import { ApiError, isUniqueViolation } from '../../http/errors';
import type { OperationInput } from '../../http/handler-types';
import { consumeEmailLink, issueEmailLink, linksRequestedSince, peekEmailLink } from '../../identity/email-links';
import { createUser, findUserByEmail } from '../../identity/users';
import { webAppPage } from '../../lib/web-app';
import { joinVerifiedDomains } from '../org-domains';
import { sendSignInLink } from './magic-link';
import { linkSent, refuseTooManyLinks, signIn, signInFailed, webApp } from './sign-in';

/** A resend waits this long after the previous link (the spec's resendSignupEmail). */
const RESEND_INTERVAL_MS = 60_000;

const activationLink = (ctx: RequestContext, token: string) => `${ctx.deps.config.baseUrl}/auth/signup/activate?token=${encodeURIComponent(token)}`;

function sendActivation(ctx: RequestContext, to: string, token: string, expiresAt: Date): void {
  const text = [
    'Someone, hopefully you, asked to create an account on the MCP control plane with this address.',
    '',
    `Create the account: ${activationLink(ctx, token)}`,
    '',
    `The link works once and until ${expiresAt.toISOString()}. If you did not ask, ignore this email: nothing is created unless the link is opened and confirmed.`,
  ].join('\n');
  // After the answer, so its timing says nothing about the address. Never the token in the log.
  ctx.deps.mailer.send({ to: [to], subject: 'Confirm your new account', text }).catch((err: unknown) => {
    ctx.log.warn({ err: (err as Error).message }, 'sign-up email not sent');
  });
}

const SENT = (email: string) => `If ${email} can use it, a link is on its way. It works once and expires soon.`;

/**
 * POST /auth/signup. Nothing is created until the emailed link is confirmed. An address with
 * an account gets a sign-in link instead, so the answer (and the work) is the same either way.
 */
export async function signUp({ body }: OperationInput<'signUp'>, ctx: RequestContext) {
  const email = body.email;
  const now = new Date();
  await refuseTooManyLinks(ctx, email, ['sign_up', 'sign_in'], 'Links', now);
  const existing = await findUserByEmail(ctx.db, email);
  if (existing) {
    const link = await ctx.personalWrite((db) => issueEmailLink(db, { purpose: 'sign_in', email, userId: existing.id, returnTo: body.return_to ?? null }, now));
    sendSignInLink(ctx, existing.email, link.token, link.expiresAt);
  } else {
    const link = await ctx.personalWrite((db) =>
      issueEmailLink(db, { purpose: 'sign_up', email, userId: null, name: body.name ?? null, returnTo: body.return_to ?? null }, now),
    );
    sendActivation(ctx, email, link.token, link.expiresAt);
  }
  return linkSent(ctx, '/sign-up', email, SENT(email));
}

/** POST /auth/signup/resend: a fresh link for a registration still waiting; the earlier one stops working. */
export async function resendSignupEmail({ body }: OperationInput<'resendSignupEmail'>, ctx: RequestContext) {
  const email = body.email;
  const now = new Date();
  const recent = await linksRequestedSince(ctx.db, ['sign_up'], email, new Date(now.getTime() - RESEND_INTERVAL_MS));
  if (recent > 0) {
    throw new ApiError('rate_limited', 'An activation email went to this address less than a minute ago; wait a moment before asking again.', {
      headers: { 'Retry-After': String(RESEND_INTERVAL_MS / 1000) },
    });
  }
  await refuseTooManyLinks(ctx, email, ['sign_up', 'sign_in'], 'Links', now);
  const pending = await ctx.db
    .selectFrom('email_links')
    .select(['name', 'return_to'])
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .where('purpose', '=', 'sign_up')
    .where('expires_at', '>', now)
    .orderBy('created_at', 'desc')
    .executeTakeFirst();
  const registered = await findUserByEmail(ctx.db, email);
  // A link row is written whatever the state, so that the answer and the next resend's limit say nothing.
  const link = await ctx.personalWrite((db) =>
    issueEmailLink(db, { purpose: 'sign_up', email, userId: null, name: pending?.name ?? null, returnTo: pending?.return_to ?? null }, now),
  );
  if (pending && !registered) sendActivation(ctx, email, link.token, link.expiresAt);
  return { status: 202 as const, body: { email, message: SENT(email) } };
}

/** GET /auth/signup/activate: the emailed link. Creates nothing (mail scanners open it too). */
export async function activateSignup({ query }: OperationInput<'activateSignup'>, ctx: RequestContext) {
  const state = await peekEmailLink(ctx.db, 'sign_up', query.token);
  if (!state.ok) return signInFailed(ctx, state.reason);
  const page = new URL(webAppPage(webApp(ctx), '/sign-up/confirm'));
  page.searchParams.set('token', query.token);
  return { status: 302 as const, headers: { Location: page.href } };
}

/** POST /auth/signup/activate: the confirmation page's button. */
export async function confirmSignup({ body }: OperationInput<'confirmSignup'>, ctx: RequestContext) {
  let joined = 0;
  const attempt = () =>
    ctx.personalWrite(async (db) => {
      const state = await consumeEmailLink(db, 'sign_up', body.token);
      if (!state.ok) return signInFailed(ctx, state.reason, 303 as const);
      // Registered meanwhile (social sign-in, another link): that account is signed in.
      const existing = await findUserByEmail(db, state.link.email);
      const userId = existing?.id ?? (await createUser(db, { email: state.link.email, name: state.link.name }));
      if (!existing) {
        const organizations = await joinVerifiedDomains(db, { id: userId, email: state.link.email, name: state.link.name }, ctx.trace);
        joined = organizations.length;
      }
      return signIn(ctx, db, userId, state.link.returnTo, existing ? 'magic_link' : 'signup', 303 as const);
    });
  try {
    const answer = await attempt();
    for (let i = 0; i < joined; i += 1) ctx.deps.onEvent?.(ctx.operationId, 'member.joined');
    return answer;
  } catch (err) {
    // The same address activated twice at once: the other request made the account; this link is used up.
    if (isUniqueViolation(err, 'users_email_key')) return signInFailed(ctx, 'link_invalid', 303 as const);
    throw err;
  }
}
