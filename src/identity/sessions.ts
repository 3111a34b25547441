import type { Executor } from '../db/database';
import { hashSecret, randomSecret } from '../lib/crypto';
import { newId } from '../lib/ids';
import { SESSION_PREFIX } from './credentials';

/**
 * A web-app session for a person: the secret goes in the cookie, only its hash is stored.
 * `secondFactorAt` records when a second factor was shown (organizations that require one
 * refuse a session without it).
 */
export async function startSession(
  db: Executor,
  input: { userId: string; expiresAt: Date; secondFactorAt?: Date | null; ip?: string | null; userAgent?: string | null },
): Promise<{ id: string; secret: string }> {
  const secret = randomSecret(SESSION_PREFIX);
  const id = newId('session');
  await db
    .insertInto('sessions')
    .values({
      id,
      user_id: input.userId,
      token_hash: hashSecret(secret),
      second_factor_at: input.secondFactorAt ?? null,
      expires_at: input.expiresAt,
      ip: input.ip ?? null,
      user_agent: input.userAgent ?? null,
    })
    .execute();
  return { id, secret };
}
