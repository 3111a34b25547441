import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { OperationInput } from '../../http/handler-types';
import { checkCode, factorsOf, failureWait, recordFailure, sessionView, type SecondFactorMethod } from '../../identity/second-factors';
import { renewSession } from '../../identity/sessions';
import { webAppPage } from '../../lib/web-app';
import { clientOf, webApp } from './sign-in';
import { recordSecurityEvent } from '../../identity/security-events';

type Proof = { method: 'totp' | 'recovery_code'; code: string } | { method: 'passkey'; credential: unknown };

type Outcome =
  { ok: true; session: Awaited<ReturnType<typeof sessionView>>; cookie: string; recoveryCodesLeft: number | null } | { ok: false; error: ApiError };

const FORM = 'application/x-www-form-urlencoded';

function sessionOf(ctx: RequestContext): { userId: string; sessionId: string } {
  const caller = ctx.authenticated;
  if (caller.kind !== 'session') throw new ApiError('requires_person', 'This is for a person signed in to the web app.');
  return { userId: caller.userId, sessionId: caller.sessionId };
}

/**
 * Checks a second factor for the caller's session and, when it holds, records it (and, for a
 * step-up, the step-up) under a new session secret. A wrong code counts against the person
 * (5 in 15 minutes, then 429), recorded in its own transaction so the refusal cannot undo it.
 */
async function prove(ctx: RequestContext, proof: Proof, stepUp: boolean): Promise<Outcome> {
  const { userId, sessionId } = sessionOf(ctx);
  const wait = await failureWait(ctx.db, userId);
  if (wait !== null) {
    return {
      ok: false,
      error: new ApiError('rate_limited', `Too many wrong codes; try again in ${wait} seconds.`, { headers: { 'Retry-After': String(wait) } }),
    };
  }
  if (proof.method === 'passkey') {
    // Passkey assertions are checked once passkeys can be registered and used to sign in.
    return { ok: false, error: new ApiError('conflict', 'Passkeys cannot be used as a second factor yet; use a TOTP or recovery code.') };
  }
  const now = new Date();
  const outcome = await ctx.personalWrite(async (db) => {
    const checked = await checkCode(db, ctx.deps.secrets, userId, proof, now);
    if (!checked.ok) return checked;
    if (checked.method === 'recovery_code') await recordSecurityEvent(db, { userId, type: 'recovery_code_used', method: null, client: clientOf(ctx) }, now);
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
    await recordSecurityEvent(db, { userId, type: 'second_factor_failed', method: proof.method, client: clientOf(ctx) }, now);
  });
  const what = proof.method === 'totp' ? 'code is wrong or was used already' : 'recovery code is wrong or was used already';
  return { ok: false, error: new ApiError('verification_failed', `That ${what}; try again with a current one.`) };
}

/** POST /auth/mfa/verify: JSON from the API, or the second-factor page's form. */
export async function verifyMfaChallenge({ body, query }: OperationInput<'verifyMfaChallenge'>, ctx: RequestContext) {
  const form = ctx.client.media === FORM;
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
  const { userId } = sessionOf(ctx);
  const factors = await factorsOf(ctx.db, userId);
  const methods: Array<'totp' | 'recovery_code'> = factors.totp ? ['totp', ...(factors.recoveryCodesLeft ? (['recovery_code'] as const) : [])] : [];
  if (methods.length === 0) {
    throw new ApiError('conflict', 'You hold no second factor to step up with; enroll TOTP (POST /user/me/mfa/totp) first.');
  }
  return { status: 200 as const, body: { methods, passkey_options: null, valid_for_seconds: 300 } };
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
