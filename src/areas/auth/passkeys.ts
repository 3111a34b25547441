import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { OperationInput } from '../../http/handler-types';
import { pageRequest, toPage } from '../../http/pagination';
import {
  checkAssertion,
  creationOptions,
  PASSKEY_COLUMNS,
  passkeyView,
  registerPasskey,
  relyingParty,
  requestOptions,
  sessionOfCookie,
  type RelyingParty,
} from '../../identity/passkeys';
import { factorsOf, organizationsRequiringSecondFactor, sessionView } from '../../identity/second-factors';
import { renewSession, requireStepUp, startSession } from '../../identity/sessions';
import { refuseUnlessSsoOptional } from '../sso-connections';
import { webAppPage } from '../../lib/web-app';
import { webApp } from './sign-in';
import { recordSecurityEvent } from '../../identity/security-events';

export const relyingPartyOf = (ctx: RequestContext): RelyingParty => relyingParty(ctx.deps.config.webauthn, webApp(ctx));

const challengeExpired = () =>
  new ApiError('challenge_expired', 'That passkey challenge expired, was used already, or was given to another session; ask for new options and try again.');

/**
 * Tells the person a factor changed, so a change they did not make (a stolen session's) does
 * not go unseen. Sent after the answer; a mail failure is logged, the change stands.
 */
async function tellFactorChanged(ctx: RequestContext, userId: string, subject: string, what: string): Promise<void> {
  const user = await ctx.db.selectFrom('users').select('email').where('id', '=', userId).executeTakeFirst();
  if (!user) return;
  const text = [
    `${what} on your MCP control plane account (${user.email}) at ${new Date().toISOString()}.`,
    '',
    `If this was not you, sign in, review your passkeys at ${webAppPage(webApp(ctx), '/account/security')}, and tell your administrator.`,
  ].join('\n');
  ctx.deps.mailer.send({ to: [user.email], subject, text }).catch((err: unknown) => {
    ctx.log.warn({ err: (err as Error).message }, 'factor change email not sent');
  });
}

/** POST /auth/passkey/registration/options */
export async function beginPasskeyRegistration(_input: OperationInput<'beginPasskeyRegistration'>, ctx: RequestContext) {
  const caller = ctx.person;
  const factors = await factorsOf(ctx.db, caller.userId);
  // With a stolen cookie alone, nobody may add their own passkey to the account.
  if (factors.totp || factors.passkeys > 0) requireStepUp(caller, 'Adding a passkey');
  const user = await ctx.db.selectFrom('users').select(['id', 'email', 'name']).where('id', '=', caller.userId).executeTakeFirstOrThrow();
  const options = await ctx.personalWrite((db) => creationOptions(db, relyingPartyOf(ctx), user, caller.sessionId));
  return { status: 200 as const, body: options };
}

/** POST /auth/passkey/registration/verify */
export async function verifyPasskeyRegistration({ body }: OperationInput<'verifyPasskeyRegistration'>, ctx: RequestContext) {
  const caller = ctx.person;
  const now = new Date();
  const outcome = await ctx.personalWrite(async (db) => {
    const registered = await registerPasskey(
      db,
      relyingPartyOf(ctx),
      { userId: caller.userId, sessionId: caller.sessionId, name: body.name ?? null, response: body.credential },
      (reason) => ctx.log.info({ reason }, 'passkey registration refused'),
      now,
    );
    if (!registered.ok) return registered;
    await recordSecurityEvent(db, { userId: caller.userId, type: 'factor_added', method: 'passkey', client: ctx.trace }, now);
    // The authenticator just verified the person: this session has shown a second factor.
    const renewed = await renewSession(db, caller.sessionId, { secondFactorAt: now, secondFactorMethod: 'passkey' }, now);
    const row = await db.selectFrom('passkeys').select(PASSKEY_COLUMNS).where('id', '=', registered.passkeyId).executeTakeFirstOrThrow();
    return { ok: true as const, passkey: passkeyView(row), cookie: renewed?.cookie ?? null };
  });
  if (!outcome.ok) {
    if (outcome.reason === 'challenge') throw challengeExpired();
    if (outcome.reason === 'duplicate') throw new ApiError('conflict', 'This passkey is registered already.');
    throw new ApiError('verification_failed', 'The passkey could not be verified for this site; try again, or with another authenticator.');
  }
  await tellFactorChanged(ctx, caller.userId, 'A passkey was added to your account', `A passkey ("${outcome.passkey.name}") was added`);
  return {
    status: 201 as const,
    headers: { Location: `/auth/passkey/${outcome.passkey.id}`, ...(outcome.cookie ? { 'Set-Cookie': outcome.cookie } : {}) },
    body: outcome.passkey,
  };
}

/** GET /auth/passkey */
export async function listPasskeys({ query }: OperationInput<'listPasskeys'>, ctx: RequestContext) {
  const caller = ctx.person;
  const page = pageRequest(query, 'passkey');
  let select = ctx.db.selectFrom('passkeys').select(PASSKEY_COLUMNS).where('user_id', '=', caller.userId);
  if (page.after) select = select.where('id', '>', page.after);
  const rows = await select
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
  return { status: 200 as const, body: toPage(rows, page, passkeyView) };
}

const notFound = () => new ApiError('not_found', 'You have no passkey with that id.');

/** PATCH /auth/passkey/{id} */
export async function renamePasskey({ params, body }: OperationInput<'renamePasskey'>, ctx: RequestContext) {
  const caller = ctx.person;
  const row = await ctx.personalWrite((db) =>
    db
      .updateTable('passkeys')
      .set({ name: body.name })
      .where('id', '=', params.id)
      .where('user_id', '=', caller.userId)
      .returning(PASSKEY_COLUMNS)
      .executeTakeFirst(),
  );
  if (!row) throw notFound();
  return { status: 200 as const, body: passkeyView(row) };
}

/** DELETE /auth/passkey/{id} */
export async function deletePasskey({ params }: OperationInput<'deletePasskey'>, ctx: RequestContext) {
  const caller = ctx.person;
  const own = await ctx.db.selectFrom('passkeys').select(['id', 'name']).where('id', '=', params.id).where('user_id', '=', caller.userId).executeTakeFirst();
  if (!own) throw notFound();
  requireStepUp(caller, 'Deleting a passkey');
  await ctx.personalWrite(async (db) => {
    const factors = await factorsOf(db, caller.userId);
    if (!factors.totp && factors.passkeys <= 1) {
      const requiring = await organizationsRequiringSecondFactor(db, caller.userId);
      if (requiring.length > 0) {
        throw new ApiError(
          'mfa_required_by_organization',
          `${requiring.map((o) => o.name).join(', ')} require${requiring.length === 1 ? 's' : ''} a second factor and this is your last one; add another (a passkey or an authenticator app) first.`,
        );
      }
    }
    await db.deleteFrom('passkeys').where('id', '=', params.id).where('user_id', '=', caller.userId).execute();
    await recordSecurityEvent(db, { userId: caller.userId, type: 'factor_removed', method: 'passkey', client: ctx.trace });
  });
  await tellFactorChanged(ctx, caller.userId, 'A passkey was removed from your account', `A passkey ("${own.name}") was deleted`);
  return { status: 204 as const };
}

/** POST /auth/passkey/authentication/options: public; bound to the browser's session when it has one. */
export async function beginPasskeyAuthentication(_input: OperationInput<'beginPasskeyAuthentication'>, ctx: RequestContext) {
  const options = await ctx.personalWrite(async (db) => {
    const sessionId = await sessionOfCookie(db, ctx.client.sessionCookie);
    return requestOptions(db, relyingPartyOf(ctx), { purpose: 'authentication', userId: null, sessionId });
  });
  return { status: 200 as const, body: options };
}

/**
 * POST /auth/passkey/authentication/verify: signs in. A passkey with user verification is
 * two factors in one, so the session starts having shown its second factor.
 */
export async function verifyPasskeyAuthentication({ body }: OperationInput<'verifyPasskeyAuthentication'>, ctx: RequestContext) {
  const now = new Date();
  const outcome = await ctx.personalWrite(async (db) => {
    const sessionId = await sessionOfCookie(db, ctx.client.sessionCookie, now);
    const checked = await checkAssertion(
      db,
      relyingPartyOf(ctx),
      { response: body.credential, purposes: ['authentication'], sessionId, userId: null },
      (reason) => ctx.log.info({ reason }, 'passkey sign-in refused'),
      now,
    );
    if (!checked.ok) return checked;
    const { email } = await db.selectFrom('users').select('email').where('id', '=', checked.userId).executeTakeFirstOrThrow();
    await refuseUnlessSsoOptional(db, email);
    const session = await startSession(
      db,
      {
        userId: checked.userId,
        secondFactorAt: now,
        replacing: ctx.client.sessionCookie ?? null,
        ip: ctx.client.ip,
        userAgent: ctx.client.userAgent,
        method: 'passkey',
      },
      now,
    );
    await db.updateTable('sessions').set({ second_factor_method: 'passkey' }).where('id', '=', session.id).execute();
    await recordSecurityEvent(db, { userId: checked.userId, type: 'signed_in', method: 'passkey', client: ctx.trace }, now);
    return { ok: true as const, cookie: session.cookie, session: await sessionView(db, session.id) };
  });
  if (!outcome.ok) {
    if (outcome.reason === 'challenge') throw challengeExpired();
    throw new ApiError('verification_failed', 'That passkey could not sign you in here; try again, or sign in with an emailed link.');
  }
  const landing = new URL(webAppPage(webApp(ctx), body.return_to ?? null));
  return {
    status: 200 as const,
    headers: { 'Set-Cookie': outcome.cookie },
    body: { session: outcome.session, redirect_to: landing.pathname + landing.search },
  };
}
