import type { Executor } from '../db/database';
import { hashSecret, randomSecret } from '../lib/crypto';

export type EmailLinkPurpose = 'sign_in' | 'sign_up';

/** The emailed link's token: a readable prefix, 32 random bytes; only its SHA-256 is stored. */
export const EMAIL_LINK_PREFIX = 'eml';

export const EMAIL_LINK_LIFETIME_MS: Record<EmailLinkPurpose, number> = {
  sign_in: 15 * 60_000,
  sign_up: 24 * 3600_000,
};

export interface EmailLink {
  purpose: EmailLinkPurpose;
  email: string;
  userId: string | null;
  name: string | null;
  returnTo: string | null;
  expiresAt: Date;
}

/** Links an address may be sent in LINK_WINDOW_MS, whatever their purposes (the spec's descriptions). */
export const LINKS_PER_WINDOW = 5;
export const LINK_WINDOW_MS = 15 * 60_000;

/** How many links of these purposes an address asked for since `since` (the per-address limits). */
export async function linksRequestedSince(db: Executor, purposes: readonly EmailLinkPurpose[], email: string, since: Date): Promise<number> {
  const row = await db
    .selectFrom('email_links')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .where('purpose', 'in', purposes)
    .where('created_at', '>', since)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/**
 * A new link; earlier unused links of the same purpose for the address stop working, so only
 * the newest email in a person's inbox signs them in.
 */
export async function issueEmailLink(
  db: Executor,
  input: { purpose: EmailLinkPurpose; email: string; userId: string | null; name?: string | null; returnTo?: string | null },
  now = new Date(),
): Promise<{ token: string; expiresAt: Date }> {
  const token = randomSecret(EMAIL_LINK_PREFIX);
  const expiresAt = new Date(now.getTime() + EMAIL_LINK_LIFETIME_MS[input.purpose]);
  await db
    .updateTable('email_links')
    .set({ used_at: now })
    .where((eb) => eb(eb.fn('lower', ['email']), '=', input.email.toLowerCase()))
    .where('purpose', '=', input.purpose)
    .where('used_at', 'is', null)
    .execute();
  await db
    .insertInto('email_links')
    .values({
      token_hash: hashSecret(token),
      purpose: input.purpose,
      email: input.email,
      user_id: input.userId,
      name: input.name ?? null,
      return_to: input.returnTo ?? null,
      expires_at: expiresAt,
      created_at: now,
    })
    .execute();
  return { token, expiresAt };
}

export type LinkState = { ok: true; link: EmailLink } | { ok: false; reason: 'link_invalid' | 'link_expired' };

function stateOf(
  row:
    | { purpose: string; email: string; user_id: string | null; name: string | null; return_to: string | null; expires_at: Date; used_at: Date | null }
    | undefined,
  purpose: EmailLinkPurpose,
  now: Date,
): LinkState {
  if (!row || row.purpose !== purpose || row.used_at) return { ok: false, reason: 'link_invalid' };
  if (row.expires_at <= now) return { ok: false, reason: 'link_expired' };
  return { ok: true, link: { purpose, email: row.email, userId: row.user_id, name: row.name, returnTo: row.return_to, expiresAt: row.expires_at } };
}

const COLUMNS = ['purpose', 'email', 'user_id', 'name', 'return_to', 'expires_at', 'used_at'] as const;

/** What a link would do, without using it up (opening the emailed link, which scanners do too). */
export async function peekEmailLink(db: Executor, purpose: EmailLinkPurpose, token: string, now = new Date()): Promise<LinkState> {
  const row = await db.selectFrom('email_links').select(COLUMNS).where('token_hash', '=', hashSecret(token)).executeTakeFirst();
  return stateOf(row, purpose, now);
}

/**
 * Uses a link up, in one statement: of two requests racing with the same token, one gets the
 * row and the other finds it used.
 */
export async function consumeEmailLink(db: Executor, purpose: EmailLinkPurpose, token: string, now = new Date()): Promise<LinkState> {
  const used = await db
    .updateTable('email_links')
    .set({ used_at: now })
    .where('token_hash', '=', hashSecret(token))
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .returning(COLUMNS)
    .executeTakeFirst();
  if (!used) return peekEmailLink(db, purpose, token, now);
  return stateOf({ ...used, used_at: null }, purpose, now);
}
