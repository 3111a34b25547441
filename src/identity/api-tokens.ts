import type { Transaction } from 'kysely';
import type { Database } from '../db/schema';
import { hashSecret, randomSecret } from '../lib/crypto';
import { newId } from '../lib/ids';
import { API_TOKEN_PREFIX } from './credentials';

export interface MintedToken {
  id: string;
  /** The token itself: shown once, never stored. */
  token: string;
  hint: string;
}

/**
 * A new API token for a member. Only its SHA-256 is stored; the caller shows the token once.
 * Its permissions are a ceiling: what it can do is always intersected with the owner's
 * current permissions.
 */
export async function mintApiToken(
  db: Transaction<Database>,
  input: { orgId: string; userId: string; name: string; permissions: readonly string[]; expiresAt?: Date | null },
): Promise<MintedToken> {
  const token = randomSecret(API_TOKEN_PREFIX);
  const id = newId('apiToken');
  const hint = token.slice(-4);
  await db
    .insertInto('api_tokens')
    .values({
      id,
      org_id: input.orgId,
      user_id: input.userId,
      name: input.name,
      token_hash: hashSecret(token),
      token_hint: hint,
      permissions: [...new Set(input.permissions)].sort(),
      expires_at: input.expiresAt ?? null,
    })
    .execute();
  return { id, token, hint };
}

export async function revokeApiToken(db: Transaction<Database>, tokenId: string, at = new Date()): Promise<{ org_id: string } | undefined> {
  return db
    .updateTable('api_tokens')
    .set({ revoked_at: at })
    .where('id', '=', tokenId)
    .where('revoked_at', 'is', null)
    .returning(['org_id'])
    .executeTakeFirst();
}
