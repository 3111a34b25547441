import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { OperationInput } from '../../http/handler-types';
import { checkCode, factorsOf, failureWait, recordFailure, sessionView, type SecondFactorMethod } from '../../identity/second-factors';
import { checkAssertion, requestOptions } from '../../identity/passkeys';
import { renewSession } from '../../identity/sessions';
import { webAppPage } from '../../lib/web-app';
import { postedByPage, webApp } from './sign-in';
import { recordSecurityEvent } from '../../identity/security-events';
import { relyingPartyOf } from './passkeys';

type Proof = { method: 'totp' | 'recovery_code'; code: string } | { method: 'passkey'; credential: unknown };

type Outcome =
  { ok: true; session: Awaited<ReturnType<typeof sessionView>>; cookie: string; recoveryCodesLeft: number | null } | { ok: false; error: ApiError };

/**
 * Checks a second factor for the caller's session and, when it holds, records it (and, for a
 * step-up, the step-up) under a new session secret. A wrong code counts against the person
 * (5 in 15 minutes, then 429), recorded in its own transaction so the refusal cannot undo it.
 */
async function prove(ctx: RequestContext, proof: Proof, stepUp: boolean): Promise<Outcome> {
  const { userId, sessionId } = ctx.person;
  const wait = await failureWait(ctx.db, userId);
  if (wait !== null) {
    return {
      ok: false,
      error: new ApiError('rate_limited', `Too many wrong codes; try again in ${wait} seconds.`, { headers: { 'Retry-After': String(wait) } }),
    };
  }
  const now = new Date();
  if (proof.method === 'passkey') return provePasskey(ctx, proof.credential, stepUp, now);
  const outcome = await ctx.personalWrite(async (db) => {
    const checked = await checkCode(db, ctx.deps.secrets, userId, proof, now);
    if (!checked.ok) return checked;
    if (checked.method === 'recovery_code') await recordSecurityEvent(db, { userId, type: 'recovery_code_used', method: null, client: ctx.trace }, now);
    const renewed = await renewSession(
      db,
      sessionId,
      { secondFactorAt: now, secondFactorMethod: checked.method as SecondFactorMethod, ...(stepUp ? { stepUpAt: now } : {}) },
      now,
    );
    if (!renewed) return { ok: false as const, reason: 'wrong' as const };
    return { ok: true as const, cookie: renewed.cookie, session: await sessionView(db, sessionId), left: (await factorsOf(db, userId)).recoveryCodesLeft };
  });
  if (outcome.ok) return { ok: true, session: outcome.session, cookie: outcome.cookie, recoveryCodesLeft: outcome.left };
  if (outcome.reason === 'not_enrolled') {
    return { ok: false, error: new ApiError('conflict', 'TOTP is off for this account, so there is no such code to check; use another factor.') };
  }
  await ctx.personalWrite(async (db) => {
    await recordFailure(db, userId, now);
    await recordSecurityEvent(db, { userId, type: 'second_factor_failed', method: proof.method, client: ctx.trace }, now);
  });
  const what = proof.method === 'totp' ? 'code is wrong or was used already' : 'recovery code is wrong or was used already';
  return { ok: false, error: new ApiError('verification_failed', `That ${what}; try again with a current one.`) };
}

/**
 * A passkey assertion as the second factor or step-up: it answers a challenge bound to this
 * session (a step-up's, or for the second factor also the sign-in options this browser asked
 * for while holding the session), once, and is one of the person's own passkeys.
 */
async function provePasskey(ctx: RequestContext, credential: unknown, stepUp: boolean, now: Date): Promise<Outcome> {
  const { userId, sessionId } = ctx.person;
  if ((await factorsOf(ctx.db, userId)).passkeys === 0) {
    return { ok: false, error: new ApiError('conflict', 'This account has no passkey; use your authenticator app or a recovery code.') };
  }
  const outcome = await ctx.personalWrite(async (db) => {
    const checked = await checkAssertion(
      db,
      relyingPartyOf(ctx),
      { response: credential, purposes: stepUp ? ['step_up'] : ['step_up', 'authentication'], sessionId, userId },
      (reason) => ctx.log.info({ reason }, 'passkey proof refused'),
      now,
    );
    if (!checked.ok) return checked;
    const renewed = await renewSession(db, sessionId, { secondFactorAt: now, secondFactorMethod: 'passkey', ...(stepUp ? { stepUpAt: now } : {}) }, now);
    if (!renewed) return { ok: false as const, reason: 'challenge' as const };
    return { ok: true as const, cookie: renewed.cookie, session: await sessionView(db, sessionId), left: (await factorsOf(db, userId)).recoveryCodesLeft };
  });
  if (outcome.ok) return { ok: true, session: outcome.session, cookie: outcome.cookie, recoveryCodesLeft: outcome.left };
  if (outcome.reason === 'challenge') {
    return {
      ok: false,
      error: new ApiError('challenge_expired', 'That passkey challenge expired, was used already, or belongs to another session; ask for new options.'),
    };
  }
  await ctx.personalWrite(async (db) => {
    await recordFailure(db, userId, now);
    await recordSecurityEvent(db, { userId, type: 'second_factor_failed', method: 'passkey', client: ctx.trace }, now);
  });
  return { ok: false, error: new ApiError('verification_failed', 'That passkey assertion did not verify, or the passkey is not yours; try again.') };
}

/** POST /auth/mfa/verify: JSON from the API, or the second-factor page's form. */
export async function verifyMfaChallenge({ body, query }: OperationInput<'verifyMfaChallenge'>, ctx: RequestContext) {
  const form = postedByPage(ctx);
  const proof = body as Proof;
  const outcome = await prove(ctx, proof, false);
  if (form) {
    const returnTo = query.return_to ?? null;
    if (!outcome.ok) {
      const page = new URL(webAppPage(webApp(ctx), '/sign-in/second-factor'));
      page.searchParams.set('error', outcome.error.code);
      if (returnTo) page.searchParams.set('return_to', returnTo);
      return { status: 303 as const, headers: { Location: page.href } };
    }
    return { status: 303 as const, headers: { Location: webAppPage(webApp(ctx), returnTo), 'Set-Cookie': outcome.cookie } };
  }
  if (!outcome.ok) throw outcome.error;
  return {
    status: 200 as const,
    headers: { 'Set-Cookie': outcome.cookie },
    body: { session: outcome.session, recovery_codes_remaining: outcome.recoveryCodesLeft },
  };
}

/** POST /auth/step-up/options: what the person can step up with. */
export async function beginStepUp(_input: OperationInput<'beginStepUp'>, ctx: RequestContext) {
  const { userId, sessionId } = ctx.person;
  const factors = await factorsOf(ctx.db, userId);
  const methods: Array<'passkey' | 'totp' | 'recovery_code'> = [
    ...(factors.passkeys > 0 ? (['passkey'] as const) : []),
    ...(factors.totp ? (['totp'] as const) : []),
    ...(factors.totp && factors.recoveryCodesLeft ? (['recovery_code'] as const) : []),
  ];
  if (methods.length === 0) {
    throw new ApiError('conflict', 'You hold no second factor to step up with; add a passkey or enroll TOTP (POST /user/me/mfa/totp) first.');
  }
  const passkeyOptions =
    factors.passkeys > 0 ? await ctx.personalWrite((db) => requestOptions(db, relyingPartyOf(ctx), { purpose: 'step_up', userId, sessionId })) : null;
  return { status: 200 as const, body: { methods, passkey_options: passkeyOptions, valid_for_seconds: 300 } };
}

/** POST /auth/step-up/verify */
export async function verifyStepUp({ body }: OperationInput<'verifyStepUp'>, ctx: RequestContext) {
  const outcome = await prove(ctx, body as Proof, true);
  if (!outcome.ok) throw outcome.error;
  return {
    status: 200 as const,
    headers: { 'Set-Cookie': outcome.cookie },
    body: { session: outcome.session, recovery_codes_remaining: outcome.recoveryCodesLeft },
  };
}
