import { sql } from 'kysely';
import type { Executor } from '../db/database';
import { hashSecret, randomSecret } from '../lib/crypto';
import { newId } from '../lib/ids';
import { ApiError } from '../http/errors';
import { SESSION_COOKIE, SESSION_PREFIX } from './credentials';

/** …and this long after sign-in, however much it is used: a stolen cookie does not live forever. */
export const SESSION_LIFETIME_MS = 30 * 24 * 3600_000;
/** A session waiting for its second factor is only good for showing it, and briefly. */
export const PENDING_SESSION_MS = 10 * 60_000;
/** A step-up allows sensitive actions for this long (the spec's `step_up_expires_at`). */
export const STEP_UP_WINDOW_MS = 5 * 60_000;

/** 403 step_up_required unless the caller's session passed a step-up in the last 5 minutes; `what` names the action. */
export function requireStepUp(caller: { kind: string; stepUpAt?: Date | null }, what: string): void {
  if (!steppedUp(caller)) {
    throw new ApiError(
      'step_up_required',
      `${what} needs a step-up within the last 5 minutes: POST /auth/step-up/options, then /auth/step-up/verify, and retry.`,
    );
  }
}

/** Whether the caller's session passed a step-up recently enough for a sensitive action. */
export function steppedUp(caller: { kind: string; stepUpAt?: Date | null }, now = new Date()): boolean {
  return caller.kind === 'session' && !!caller.stepUpAt && now.getTime() - caller.stepUpAt.getTime() <= STEP_UP_WINDOW_MS;
}

export interface StartedSession {
  id: string;
  secret: string;
  expiresAt: Date;
  /** The Set-Cookie value that hands it to the browser. */
  cookie: string;
}

/**
 * `__Host-` keeps the cookie to this host, over HTTPS, on every path: a sibling subdomain
 * cannot set or overwrite it (browsers refuse a `__Host-` cookie with a Domain attribute).
 * Max-Age is the session's hard end; the idle limit is the server's to enforce.
 */
export function sessionCookie(secret: string, expiresAt: Date, now = new Date()): string {
  const maxAge = Math.max(0, Math.floor((expiresAt.getTime() - now.getTime()) / 1000));
  return `${SESSION_COOKIE}=${secret}; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=${maxAge}`;
}

export const CLEARED_SESSION_COOKIE = `${SESSION_COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0`;

/**
 * A web-app session for a person: the secret goes in the cookie, only its hash is stored.
 * `secondFactorAt` records when a second factor was shown (organizations that require one
 * refuse a session without it). A session that still owes its second factor (`pending`)
 * lasts minutes; showing the factor renews it for the full lifetime. `replacing` is the
 * session this browser presented, if any: signing in again ends it, so one browser holds
 * one session.
 */
export async function startSession(
  db: Executor,
  input: {
    userId: string;
    secondFactorAt?: Date | null;
    pending?: boolean;
    replacing?: string | null;
    ip?: string | null;
    userAgent?: string | null;
    /** How the person signed in (`magic_link`, `passkey`, a social provider's key, `sso`), and through which SSO connection. */
    method?: string | null;
    ssoConnectionId?: string | null;
  },
  now = new Date(),
): Promise<StartedSession> {
  const secret = randomSecret(SESSION_PREFIX);
  const id = newId('session');
  const expiresAt = new Date(now.getTime() + (input.pending ? PENDING_SESSION_MS : SESSION_LIFETIME_MS));
  if (input.replacing) await endSession(db, { secret: input.replacing }, now);
  await db
    .insertInto('sessions')
    .values({
      id,
      user_id: input.userId,
      token_hash: hashSecret(secret),
      second_factor_at: input.secondFactorAt ?? null,
      expires_at: expiresAt,
      ip: input.ip ?? null,
      user_agent: input.userAgent ?? null,
      last_seen_at: now,
      method: input.method ?? null,
      sso_connection_id: input.ssoConnectionId ?? null,
    })
    .execute();
  return { id, secret, expiresAt, cookie: sessionCookie(secret, expiresAt, now) };
}

/**
 * Gives a session a new secret when its privileges change (a second factor shown, a
 * step-up): a secret seen before the change, by a person looking over a shoulder or a
 * proxy's log, is worth nothing after it. Showing the second factor ends the short
 * `mfa_pending` lifetime: the session then lasts as long as any from its sign-in.
 */
export async function renewSession(
  db: Executor,
  sessionId: string,
  change: { secondFactorAt?: Date; secondFactorMethod?: 'totp' | 'recovery_code' | 'passkey'; stepUpAt?: Date },
  now = new Date(),
): Promise<{ secret: string; expiresAt: Date; cookie: string } | null> {
  const secret = randomSecret(SESSION_PREFIX);
  const row = await db
    .updateTable('sessions')
    .set({
      token_hash: hashSecret(secret),
      ...(change.secondFactorAt
        ? {
            second_factor_at: change.secondFactorAt,
            second_factor_method: change.secondFactorMethod ?? null,
            expires_at: sql<Date>`created_at + make_interval(secs => ${SESSION_LIFETIME_MS / 1000})`,
          }
        : {}),
      ...(change.stepUpAt ? { step_up_at: change.stepUpAt } : {}),
    })
    .where('id', '=', sessionId)
    .where('revoked_at', 'is', null)
    .returning('expires_at')
    .executeTakeFirst();
  if (!row) return null;
  return { secret, expiresAt: row.expires_at, cookie: sessionCookie(secret, row.expires_at, now) };
}

/** Ends a session at once, everywhere (every process forgets it: the sessions table notifies). */
export async function endSession(db: Executor, which: { id: string } | { secret: string }, now = new Date()): Promise<boolean> {
  const ended = await db
    .updateTable('sessions')
    .set({ revoked_at: now })
    .where('revoked_at', 'is', null)
    .where((eb) => ('id' in which ? eb('id', '=', which.id) : eb('token_hash', '=', hashSecret(which.secret))))
    .executeTakeFirst();
  return Number(ended.numUpdatedRows) > 0;
}
