import { randomBytes } from 'node:crypto';
import type { Transaction } from 'kysely';
import type { Database } from '../db/schema';
import { hashSecret } from '../lib/crypto';
import { newId } from '../lib/ids';
import type { Authenticator } from './credentials';

/** A SCIM token: `scim_` and 43 letters and digits (about 256 bits). */
export const SCIM_TOKEN_PREFIX = 'scim';
const SECRET_LENGTH = 43;
const ALPHANUMERIC = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
// Bytes at or above this are skipped so that every character is equally likely (62 * 4 = 248).
const UNBIASED_BELOW = 248;
const LAST_USED_RESOLUTION_MS = 60_000;

/**
 * Letters and digits only, not base64url: identity providers' admin consoles and setup
 * scripts paste the token into places where `-` or `_` at an end gets trimmed or quoted.
 */
function alphanumericSecret(): string {
  let out = '';
  while (out.length < SECRET_LENGTH) {
    for (const byte of randomBytes(64)) {
      if (byte < UNBIASED_BELOW && out.length < SECRET_LENGTH) out += ALPHANUMERIC[byte % 62];
    }
  }
  return `${SCIM_TOKEN_PREFIX}_${out}`;
}

export interface MintedScimToken {
  id: string;
  /** Shown once, never stored. */
  token: string;
}

/** A new SCIM token for an organization; only its SHA-256 and last four characters are kept. */
export async function mintScimToken(
  db: Transaction<Database>,
  input: { orgId: string; name: string; expiresAt: Date | null; createdBy: string | null },
): Promise<MintedScimToken> {
  const token = alphanumericSecret();
  const id = newId('scimToken');
  await db
    .insertInto('scim_tokens')
    .values({
      id,
      org_id: input.orgId,
      name: input.name,
      token_hash: hashSecret(token),
      token_hint: token.slice(-4),
      expires_at: input.expiresAt,
      created_by_user_id: input.createdBy,
    })
    .execute();
  return { id, token };
}

/**
 * The `scimToken` security scheme: an organization's identity provider on /scim/v2/*. It is
 * bound to its organization and acts for no person, so it carries no permissions: the SCIM
 * operations need none (`x-permission: null`) and no other operation accepts it. Not remembered
 * by the credential cache (no `cache`): every request reads the token, so a revocation holds on
 * every replica from the next request, and an identity provider's request rate is low.
 */
export const scimTokenAuthenticator: Authenticator = {
  describes: 'a SCIM token',
  howToSend: 'send a SCIM token as "Authorization: Bearer scim_…"',
  recognizes: (credential) => credential.scheme === 'bearer' && credential.secret.startsWith(`${SCIM_TOKEN_PREFIX}_`),
  async authenticate(credential, db, now = new Date()) {
    const token = await db
      .selectFrom('scim_tokens as t')
      .innerJoin('organizations as o', 'o.id', 't.org_id')
      .select(['t.id', 't.org_id', 't.expires_at', 't.revoked_at', 't.last_used_at', 'o.require_mfa'])
      .where('t.token_hash', '=', hashSecret(credential.secret))
      .executeTakeFirst();
    if (!token || token.revoked_at) return { status: 'invalid', detail: 'The SCIM token is unknown or revoked.' };
    if (token.expires_at && token.expires_at <= now) return { status: 'invalid', detail: 'The SCIM token has expired; create another (POST /scim-token).' };
    if (!token.last_used_at || now.getTime() - token.last_used_at.getTime() > LAST_USED_RESOLUTION_MS) {
      const stale = new Date(now.getTime() - LAST_USED_RESOLUTION_MS);
      void db
        .updateTable('scim_tokens')
        .set({ last_used_at: now })
        .where('id', '=', token.id)
        .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', stale)]))
        .execute()
        .catch(() => undefined);
    }
    return {
      status: 'ok',
      caller: {
        kind: 'scim_token',
        userId: null,
        tokenId: token.id,
        orgId: token.org_id,
        access: { orgId: token.org_id, requireMfa: token.require_mfa, permissions: new Set() },
      },
    };
  },
};
