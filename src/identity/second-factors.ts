import { randomBytes } from 'node:crypto';
import { generateSecret, generateURI, verify } from 'otplib';
import type { Executor } from '../db/database';
import { hashSecret, type SecretBox } from '../lib/crypto';
import { STEP_UP_WINDOW_MS } from './sessions';

/**
 * A person's second factors: TOTP (RFC 6238) with one-time recovery codes. Passkeys come
 * with their own module. Everything here acts for one user and is the person's own, not an
 * organization's: no audit entries, no events.
 */

export const TOTP_ISSUER = 'MCP control plane';
export const TOTP_PERIOD_S = 30 as const;
/** A pending enrollment must be confirmed within this time (the spec's TotpEnrollment). */
export const TOTP_ENROLLMENT_MS = 15 * 60_000;
/** Wrong codes allowed per person in FAILURE_WINDOW_MS before 429. */
export const MAX_FAILURES = 5;
export const FAILURE_WINDOW_MS = 15 * 60_000;
export const RECOVERY_CODE_COUNT = 10;

export const totpSecretContext = (userId: string) => `users.totp_secret_enc:${userId}`;
export const pendingTotpSecretContext = (userId: string) => `users.totp_pending_secret_enc:${userId}`;

export type SecondFactorMethod = 'totp' | 'recovery_code' | 'passkey';

/** What the person holds, for choosing how they may prove themselves. */
export async function factorsOf(db: Executor, userId: string): Promise<{ totp: boolean; passkeys: number; recoveryCodesLeft: number | null }> {
  const row = await db
    .selectFrom('users as u')
    .select((eb) => [
      'u.totp_enabled_at',
      eb.selectFrom('passkeys as p').select(eb.fn.countAll<string>().as('n')).whereRef('p.user_id', '=', 'u.id').as('passkeys'),
      eb
        .selectFrom('recovery_codes as r')
        .select(eb.fn.countAll<string>().as('n'))
        .whereRef('r.user_id', '=', 'u.id')
        .where('r.used_at', 'is', null)
        .as('codes'),
    ])
    .where('u.id', '=', userId)
    .executeTakeFirstOrThrow();
  const totp = row.totp_enabled_at !== null;
  return { totp, passkeys: Number(row.passkeys ?? 0), recoveryCodesLeft: totp ? Number(row.codes ?? 0) : null };
}

/**
 * Whether a new session of this person starts `mfa_pending`: they hold a second factor and an
 * organization they are an active member of requires one. (Someone who holds none is let in,
 * and those organizations refuse them with 403 mfa_setup_required until they enroll one.)
 */
export async function owesSecondFactor(db: Executor, userId: string): Promise<boolean> {
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

/** The organizations, by name, that require a second factor of this active member: turning off their last factor is refused. */
export function organizationsRequiringSecondFactor(db: Executor, userId: string): Promise<{ name: string }[]> {
  return db
    .selectFrom('memberships as m')
    .innerJoin('organizations as o', 'o.id', 'm.org_id')
    .select('o.name')
    .where('m.user_id', '=', userId)
    .where('m.status', '=', 'active')
    .where('o.require_mfa', '=', true)
    .orderBy('o.name')
    .execute();
}

/** The session as the API shows it (AuthSession), with its state computed from the person's factors and organizations. */
export async function sessionView(db: Executor, sessionId: string) {
  const row = await db
    .selectFrom('sessions')
    .select(['id', 'user_id', 'second_factor_at', 'second_factor_method', 'step_up_at', 'created_at', 'expires_at'])
    .where('id', '=', sessionId)
    .executeTakeFirstOrThrow();
  const pending = row.second_factor_at === null && (await owesSecondFactor(db, row.user_id));
  const stepUpEnds = row.step_up_at ? new Date(row.step_up_at.getTime() + STEP_UP_WINDOW_MS) : null;
  return {
    id: row.id,
    user_id: row.user_id,
    state: pending ? ('mfa_pending' as const) : ('active' as const),
    second_factor_at: row.second_factor_at?.toISOString() ?? null,
    second_factor_method: row.second_factor_method,
    step_up_at: row.step_up_at?.toISOString() ?? null,
    step_up_expires_at: stepUpEnds?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
    expires_at: row.expires_at.toISOString(),
  };
}

// ---------------------------------------------------------------------------------------
// Enrollment
// ---------------------------------------------------------------------------------------

/** A new pending secret (replacing any earlier pending one); TOTP stays as it is until confirmed. */
export async function beginTotpEnrollment(db: Executor, secrets: SecretBox, user: { id: string; email: string }, now = new Date()) {
  const secret = generateSecret();
  const expiresAt = new Date(now.getTime() + TOTP_ENROLLMENT_MS);
  await db
    .updateTable('users')
    .set({ totp_pending_secret_enc: secrets.seal(secret, pendingTotpSecretContext(user.id)), totp_pending_expires_at: expiresAt })
    .where('id', '=', user.id)
    .execute();
  const uri = generateURI({ issuer: TOTP_ISSUER, label: user.email, secret, algorithm: 'sha1', digits: 6, period: TOTP_PERIOD_S });
  return {
    secret,
    otpauth_uri: uri,
    issuer: TOTP_ISSUER,
    account_name: user.email,
    algorithm: 'SHA1' as const,
    digits: 6 as const,
    period: TOTP_PERIOD_S,
    expires_at: expiresAt.toISOString(),
  };
}

/** The time step a code matches (this one, or one either side for clock drift), or null. Exported for the RFC 6238 vectors. */
export async function matchingStep(secret: string, code: string, now: Date): Promise<number | null> {
  const result = await verify({ secret, token: code, epoch: Math.floor(now.getTime() / 1000), epochTolerance: TOTP_PERIOD_S, period: TOTP_PERIOD_S });
  if (!result.valid) return null;
  return Math.floor(now.getTime() / 1000 / TOTP_PERIOD_S) + result.delta;
}

export type EnrollmentOutcome = { ok: true; recoveryCodes: string[] } | { ok: false; reason: 'no_pending' | 'already_on' | 'wrong_code' };

/** Confirms the pending secret with a code: TOTP is on, with a fresh set of recovery codes. */
export async function confirmTotpEnrollment(db: Executor, secrets: SecretBox, userId: string, code: string, now = new Date()): Promise<EnrollmentOutcome> {
  const user = await db
    .selectFrom('users')
    .select(['totp_enabled_at', 'totp_pending_secret_enc', 'totp_pending_expires_at'])
    .where('id', '=', userId)
    .forUpdate()
    .executeTakeFirstOrThrow();
  if (user.totp_enabled_at) return { ok: false, reason: 'already_on' };
  if (!user.totp_pending_secret_enc || !user.totp_pending_expires_at || user.totp_pending_expires_at <= now) return { ok: false, reason: 'no_pending' };
  const secret = secrets.open(user.totp_pending_secret_enc, pendingTotpSecretContext(userId));
  const step = await matchingStep(secret, code, now);
  if (step === null) return { ok: false, reason: 'wrong_code' };
  await db
    .updateTable('users')
    .set({
      totp_secret_enc: secrets.seal(secret, totpSecretContext(userId)),
      totp_enabled_at: now,
      totp_last_step: step,
      totp_pending_secret_enc: null,
      totp_pending_expires_at: null,
    })
    .where('id', '=', userId)
    .execute();
  return { ok: true, recoveryCodes: await replaceRecoveryCodes(db, userId, now) };
}

/** Turns TOTP off: the secret and the recovery codes go. */
export async function removeTotp(db: Executor, userId: string): Promise<boolean> {
  const done = await db
    .updateTable('users')
    .set({ totp_secret_enc: null, totp_enabled_at: null, totp_last_step: null, totp_pending_secret_enc: null, totp_pending_expires_at: null })
    .where('id', '=', userId)
    .where('totp_enabled_at', 'is not', null)
    .executeTakeFirst();
  await db.deleteFrom('recovery_codes').where('user_id', '=', userId).execute();
  return Number(done.numUpdatedRows) > 0;
}

// ---------------------------------------------------------------------------------------
// Recovery codes
// ---------------------------------------------------------------------------------------

const CODE_ALPHABET = 'abcdefghijkmnpqrstuvwxyz23456789';

function newRecoveryCode(): string {
  const bytes = randomBytes(10);
  const chars = [...bytes].map((b) => CODE_ALPHABET[b % CODE_ALPHABET.length]).join('');
  return `${chars.slice(0, 5)}-${chars.slice(5)}`;
}

/** A code as typed (any case, with or without its dash), as stored. */
const normalizedCode = (code: string) => code.replace('-', '').toLowerCase();

/** Ten new codes, shown once; the earlier set stops working. */
export async function replaceRecoveryCodes(db: Executor, userId: string, now = new Date()): Promise<string[]> {
  const codes = new Set<string>();
  while (codes.size < RECOVERY_CODE_COUNT) codes.add(newRecoveryCode());
  await db.deleteFrom('recovery_codes').where('user_id', '=', userId).execute();
  await db
    .insertInto('recovery_codes')
    .values([...codes].map((code) => ({ user_id: userId, code_hash: hashSecret(normalizedCode(code)), created_at: now })))
    .execute();
  return [...codes];
}

// ---------------------------------------------------------------------------------------
// Proofs
// ---------------------------------------------------------------------------------------

export type ProofOutcome = { ok: true; method: SecondFactorMethod } | { ok: false; reason: 'not_enrolled' | 'wrong' };

/**
 * Checks a TOTP or recovery code. A TOTP code is accepted once: its time step must be later
 * than the last one accepted (RFC 6238 §5.2), which also refuses an earlier code once a later
 * one was used. A recovery code is used up.
 */
export async function checkCode(
  db: Executor,
  secrets: SecretBox,
  userId: string,
  proof: { method: 'totp' | 'recovery_code'; code: string },
  now = new Date(),
): Promise<ProofOutcome> {
  const user = await db
    .selectFrom('users')
    .select(['totp_enabled_at', 'totp_secret_enc', 'totp_last_step'])
    .where('id', '=', userId)
    .forUpdate()
    .executeTakeFirstOrThrow();
  if (!user.totp_enabled_at || !user.totp_secret_enc) return { ok: false, reason: 'not_enrolled' };
  if (proof.method === 'recovery_code') {
    const used = await db
      .updateTable('recovery_codes')
      .set({ used_at: now })
      .where('user_id', '=', userId)
      .where('code_hash', '=', hashSecret(normalizedCode(proof.code)))
      .where('used_at', 'is', null)
      .executeTakeFirst();
    return Number(used.numUpdatedRows) > 0 ? { ok: true, method: 'recovery_code' } : { ok: false, reason: 'wrong' };
  }
  const step = await matchingStep(secrets.open(user.totp_secret_enc, totpSecretContext(userId)), proof.code, now);
  if (step === null || (user.totp_last_step !== null && step <= user.totp_last_step)) return { ok: false, reason: 'wrong' };
  await db.updateTable('users').set({ totp_last_step: step }).where('id', '=', userId).execute();
  return { ok: true, method: 'totp' };
}

/** Whether the person has failed too often lately; the seconds to wait when so. */
export async function failureWait(db: Executor, userId: string, now = new Date()): Promise<number | null> {
  const recent = await db
    .selectFrom('second_factor_failures')
    .select('failed_at')
    .where('user_id', '=', userId)
    .where('failed_at', '>', new Date(now.getTime() - FAILURE_WINDOW_MS))
    .orderBy('failed_at')
    .execute();
  if (recent.length < MAX_FAILURES) return null;
  const oldest = recent[recent.length - MAX_FAILURES]!.failed_at;
  return Math.max(1, Math.ceil((oldest.getTime() + FAILURE_WINDOW_MS - now.getTime()) / 1000));
}

export async function recordFailure(db: Executor, userId: string, now = new Date()): Promise<void> {
  await db.insertInto('second_factor_failures').values({ user_id: userId, failed_at: now }).execute();
  await db
    .deleteFrom('second_factor_failures')
    .where('user_id', '=', userId)
    .where('failed_at', '<', new Date(now.getTime() - FAILURE_WINDOW_MS))
    .execute();
}
