import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { OperationInput } from '../../http/handler-types';
import {
  beginTotpEnrollment,
  confirmTotpEnrollment,
  factorsOf,
  organizationsRequiringSecondFactor,
  failureWait,
  recordFailure,
  removeTotp,
  replaceRecoveryCodes,
} from '../../identity/second-factors';
import { renewSession, requireStepUp } from '../../identity/sessions';
import { recordSecurityEvent, tellPerson } from '../../identity/security-events';
import { pageRequest, toPage } from '../../http/pagination';
import { blockedReason } from './current-user.service';

/** POST /user/me/mfa/totp */
export async function beginTotp(_input: OperationInput<'beginTotpEnrollment'>, ctx: RequestContext) {
  const caller = ctx.person;
  const factors = await factorsOf(ctx.db, caller.userId);
  if (factors.totp) throw new ApiError('conflict', 'TOTP is on already; turn it off (DELETE /user/me/mfa/totp) to change authenticator.');
  // Adding a factor when one is held is a change of factors: the person proves it is them.
  if (factors.passkeys > 0) requireStepUp(caller, 'Adding an authenticator app');
  const user = await ctx.db.selectFrom('users').select(['id', 'email']).where('id', '=', caller.userId).executeTakeFirstOrThrow();
  const enrollment = await ctx.personalWrite((db) => beginTotpEnrollment(db, ctx.deps.secrets, user));
  return { status: 200 as const, headers: { 'Cache-Control': 'no-store' as const }, body: enrollment };
}

/** POST /user/me/mfa/totp/verify */
export async function verifyTotp({ body }: OperationInput<'verifyTotpEnrollment'>, ctx: RequestContext) {
  const caller = ctx.person;
  const wait = await failureWait(ctx.db, caller.userId);
  if (wait !== null) throw new ApiError('rate_limited', `Too many wrong codes; try again in ${wait} seconds.`, { headers: { 'Retry-After': String(wait) } });
  const now = new Date();
  const outcome = await ctx.personalWrite(async (db) => {
    const confirmed = await confirmTotpEnrollment(db, ctx.deps.secrets, caller.userId, body.code, now);
    if (!confirmed.ok) return confirmed;
    await recordSecurityEvent(db, { userId: caller.userId, type: 'factor_added', method: 'totp', client: ctx.trace }, now);
    // The code just shown is this session's second factor.
    const renewed = await renewSession(db, caller.sessionId, { secondFactorAt: now, secondFactorMethod: 'totp' }, now);
    return { ...confirmed, cookie: renewed?.cookie ?? null };
  });
  if (!outcome.ok) {
    if (outcome.reason === 'already_on') throw new ApiError('conflict', 'TOTP is on already.');
    if (outcome.reason === 'no_pending')
      throw new ApiError('conflict', 'No enrollment is pending, or it lapsed after 15 minutes; start again with POST /user/me/mfa/totp.');
    await ctx.personalWrite((db) => recordFailure(db, caller.userId, now));
    throw new ApiError('verification_failed', 'That code does not match the new secret; check the app’s clock and try the current code.');
  }
  void tellPerson(ctx.db, ctx.deps.mailer, ctx.log, { userId: caller.userId, type: 'factor_added', method: 'totp', client: ctx.trace });
  return {
    status: 200 as const,
    headers: { 'Cache-Control': 'no-store' as const, ...(outcome.cookie ? { 'Set-Cookie': outcome.cookie } : {}) },
    body: { recovery_codes: outcome.recoveryCodes, generated_at: now.toISOString() },
  };
}

/** DELETE /user/me/mfa/totp */
export async function disableTotp(_input: OperationInput<'disableTotp'>, ctx: RequestContext) {
  const caller = ctx.person;
  requireStepUp(caller, 'Turning off TOTP');
  const factors = await factorsOf(ctx.db, caller.userId);
  if (!factors.totp) throw new ApiError('not_found', 'TOTP is not on.');
  if (factors.passkeys === 0) {
    const requiring = await organizationsRequiringSecondFactor(ctx.db, caller.userId);
    if (requiring.length > 0) throw new ApiError('mfa_required_by_organization', blockedReason(requiring));
  }
  const event = { userId: caller.userId, type: 'factor_removed' as const, method: 'totp', client: ctx.trace };
  await ctx.personalWrite(async (db) => {
    await removeTotp(db, caller.userId);
    await recordSecurityEvent(db, event);
  });
  void tellPerson(ctx.db, ctx.deps.mailer, ctx.log, event);
  return { status: 204 as const };
}

/** POST /user/me/mfa/recovery-codes/regenerate */
export async function regenerateRecoveryCodes(_input: OperationInput<'regenerateRecoveryCodes'>, ctx: RequestContext) {
  const caller = ctx.person;
  requireStepUp(caller, 'New recovery codes');
  const factors = await factorsOf(ctx.db, caller.userId);
  if (!factors.totp) throw new ApiError('conflict', 'TOTP is off, so there are no recovery codes to replace.');
  const now = new Date();
  const event = { userId: caller.userId, type: 'recovery_codes_regenerated' as const, method: null, client: ctx.trace };
  const codes = await ctx.personalWrite(async (db) => {
    await recordSecurityEvent(db, event, now);
    return replaceRecoveryCodes(db, caller.userId, now);
  });
  void tellPerson(ctx.db, ctx.deps.mailer, ctx.log, event);
  return { status: 200 as const, headers: { 'Cache-Control': 'no-store' as const }, body: { recovery_codes: codes, generated_at: now.toISOString() } };
}

/** GET /user/me/security-events: newest first (the cursor is the last id of the previous page). */
export async function listSecurityEvents({ query }: OperationInput<'listSecurityEvents'>, ctx: RequestContext) {
  const caller = ctx.person;
  const page = pageRequest(query, 'securityEvent');
  let select = ctx.db
    .selectFrom('security_events')
    .select(['id', 'type', 'method', 'ip', 'user_agent', 'created_at'])
    .where('user_id', '=', caller.userId)
    .orderBy('id', 'desc')
    .limit(page.limit + 1);
  if (page.after) select = select.where('id', '<', page.after);
  const rows = await select.execute();
  return {
    status: 200 as const,
    body: toPage(rows, page, (r) => ({ id: r.id, type: r.type, method: r.method, ip: r.ip, user_agent: r.user_agent, created_at: r.created_at.toISOString() })),
  };
}
