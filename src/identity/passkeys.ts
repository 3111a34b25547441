import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import {
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
  type AuthenticationResponseJSON,
  type RegistrationResponseJSON,
} from '@simplewebauthn/server';
import type { Executor } from '../db/database';
import { hashSecret } from '../lib/crypto';
import { newId } from '../lib/ids';

/**
 * Passkeys (WebAuthn Level 3): the challenges handed out, registration and assertion checks,
 * and the person's list. A passkey belongs to the person, not to an organization: no audit
 * entries, no events.
 */

/** How long a browser has to answer a challenge (WebAuthn's `timeout`, and the row's life). */
export const CHALLENGE_MS = 5 * 60_000;
/** EdDSA, ES256, RS256: what the spec's `pubKeyCredParams` offers, and all a response may use. */
export const ALGORITHMS = [-8, -7, -257] as const;
export const RP_NAME = 'MCP control plane';

export type ChallengePurpose = 'registration' | 'authentication' | 'step_up';

export interface RelyingParty {
  id: string;
  origins: string[];
}

/**
 * The relying party: configured, or the web app's own host and origin. Browsers refuse an IP
 * address as a relying-party id, so a web app on a loopback address (`make start` answers on
 * http://127.0.0.1:8080) uses `localhost`, and its pages must be opened as http://localhost:….
 */
export function relyingParty(configured: { rpId: string | null; origins: readonly string[] }, webAppUrl: string): RelyingParty {
  const web = new URL(webAppUrl);
  const loopback = web.hostname === '127.0.0.1' || web.hostname === '[::1]';
  const id = configured.rpId ?? (isIP(web.hostname.replace(/^\[|\]$/g, '')) !== 0 && loopback ? 'localhost' : web.hostname);
  if (configured.origins.length > 0) return { id, origins: [...configured.origins] };
  const origins = [web.origin];
  if (loopback) origins.push(`${web.protocol}//localhost${web.port ? `:${web.port}` : ''}`);
  return { id, origins };
}

/**
 * Names of well-known authenticators by AAGUID (from the community list
 * passkey-authenticator-aaguids). Most passkeys are made with `attestation: none`, where
 * several platforms send all zeros: those stay unnamed.
 */
const AAGUID_NAMES: Record<string, string> = {
  'fbfc3007-154e-4ecc-8c0b-6e020557d7bd': 'iCloud Keychain',
  'dd4ec289-e01d-41c9-bb89-70fa845d4bf2': 'iCloud Keychain (Managed)',
  'ea9b8d66-4d01-1d21-3ce4-b6b48cb575d4': 'Google Password Manager',
  'adce0002-35bc-c60a-648b-0b25f1f05503': 'Chrome on Mac',
  '08987058-cadc-4b81-b6e1-30de50dcbe96': 'Windows Hello',
  '9ddd1817-af5a-4672-a2b9-3e3dd95000a9': 'Windows Hello',
  '6028b017-b1d4-4c02-b4b3-afcdafc96bb2': 'Windows Hello',
  'bada5566-a7aa-401f-bd96-45619a55120d': '1Password',
  'd548826e-79b4-db40-a3d8-11116f7e8349': 'Bitwarden',
  '531126d6-e717-415c-9320-3d9aa6981239': 'Dashlane',
  'b84e4048-15dc-4dd0-8640-f4f60813c8af': 'NordPass',
  '0ea242b4-43c4-4a1b-8b17-dd6d0b6baec6': 'Keeper',
  'f3809540-7f14-49c1-a8b3-8f813b225541': 'Enpass',
  '53414d53-554e-4700-0000-000000000000': 'Samsung Pass',
  'cb69481e-8ff7-4039-93ec-0a2729a154a8': 'YubiKey 5 Series',
  'ee882879-721c-4913-9775-3dfcce97072a': 'YubiKey 5 Series',
  'fa2b99dc-9e39-4257-8f92-4a30d23c4118': 'YubiKey 5 Series with NFC',
  '2fc0579f-8113-47ea-b116-bb5a8db9202a': 'YubiKey 5 Series with NFC',
  'c5ef55ff-ad9a-4b9f-b580-adebafe026d0': 'YubiKey 5Ci',
};
export const DEFAULT_PASSKEY_NAME = 'Passkey';
export const authenticatorName = (aaguid: string | null): string | null => (aaguid ? (AAGUID_NAMES[aaguid.toLowerCase()] ?? null) : null);

const base64url = (bytes: Uint8Array | Buffer) => Buffer.from(bytes).toString('base64url');

// ---------------------------------------------------------------------------------------
// Challenges
// ---------------------------------------------------------------------------------------

/**
 * A new challenge, stored with what it is for and whom: only that purpose, that session (or,
 * for a sign-in from a browser without one, no session), once, within CHALLENGE_MS. Rows
 * past their time are swept on the way, so the public options endpoint does not fill the table.
 */
export async function issueChallenge(
  db: Executor,
  input: { purpose: ChallengePurpose; userId: string | null; sessionId: string | null; userHandle?: string },
  now = new Date(),
): Promise<string> {
  const challenge = base64url(randomBytes(32));
  await db
    .deleteFrom('webauthn_challenges')
    .where('expires_at', '<', new Date(now.getTime() - CHALLENGE_MS))
    .execute();
  await db
    .insertInto('webauthn_challenges')
    .values({
      challenge,
      purpose: input.purpose,
      user_id: input.userId,
      session_id: input.sessionId,
      user_handle: input.userHandle ?? null,
      expires_at: new Date(now.getTime() + CHALLENGE_MS),
      created_at: now,
    })
    .execute();
  return challenge;
}

/** The challenge a browser's response answers (inside its clientDataJSON), or null when unreadable. */
export function answeredChallenge(response: { response?: { clientDataJSON?: unknown } } | null | undefined): string | null {
  const encoded = response?.response?.clientDataJSON;
  if (typeof encoded !== 'string' || encoded.length > 16_384) return null;
  try {
    const data = JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8')) as { challenge?: unknown };
    return typeof data.challenge === 'string' && data.challenge.length <= 512 ? data.challenge : null;
  } catch {
    return null;
  }
}

/**
 * Uses a challenge up: it must exist, be for one of `purposes`, be bound to `sessionId` (null:
 * to no session), and be unused and unexpired. The update is the check, so two requests with
 * one challenge cannot both pass. Answers the user it was issued for, if any.
 */
export async function redeemChallenge(
  db: Executor,
  challenge: string | null,
  purposes: readonly ChallengePurpose[],
  sessionId: string | null,
  now = new Date(),
): Promise<{ ok: true; userId: string | null; purpose: ChallengePurpose; userHandle: string | null } | { ok: false }> {
  if (!challenge) return { ok: false };
  const row = await db
    .updateTable('webauthn_challenges')
    .set({ used_at: now })
    .where('challenge', '=', challenge)
    .where('purpose', 'in', [...purposes])
    .where((eb) => (sessionId === null ? eb('session_id', 'is', null) : eb('session_id', '=', sessionId)))
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .returning(['user_id', 'purpose', 'user_handle'])
    .executeTakeFirst();
  return row ? { ok: true, userId: row.user_id, purpose: row.purpose as ChallengePurpose, userHandle: row.user_handle } : { ok: false };
}

/** The live session a browser's cookie names, if any (a public endpoint binds its challenge to it). */
export async function sessionOfCookie(db: Executor, secret: string | null | undefined, now = new Date()): Promise<string | null> {
  if (!secret) return null;
  const row = await db
    .selectFrom('sessions')
    .select('id')
    .where('token_hash', '=', hashSecret(secret))
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', now)
    .executeTakeFirst();
  return row?.id ?? null;
}

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

async function descriptorsOf(db: Executor, userId: string) {
  const rows = await db.selectFrom('passkeys').select(['credential_id', 'transports']).where('user_id', '=', userId).orderBy('id').execute();
  return rows.map((r) => ({ id: r.credential_id, type: 'public-key' as const, transports: r.transports as Transport[] }));
}

type Transport = 'ble' | 'hybrid' | 'internal' | 'nfc' | 'smart-card' | 'usb';
const TRANSPORTS = new Set<string>(['ble', 'hybrid', 'internal', 'nfc', 'smart-card', 'usb']);

/**
 * The person's WebAuthn user handle: the one their passkeys were made with, or 32 new random
 * bytes (WebAuthn §14.6.1: never the email or anything that names them). Keeping one handle
 * per person lets an authenticator tell their passkeys from another account's.
 */
async function userHandleOf(db: Executor, userId: string): Promise<string> {
  const row = await db.selectFrom('passkeys').select('user_handle').where('user_id', '=', userId).where('user_handle', '!=', '').executeTakeFirst();
  return row?.user_handle ?? base64url(randomBytes(32));
}

/** Creation options for a new passkey of the person, its challenge bound to their session. */
export async function creationOptions(db: Executor, rp: RelyingParty, user: { id: string; email: string; name: string | null }, sessionId: string) {
  const userHandle = await userHandleOf(db, user.id);
  const challenge = await issueChallenge(db, { purpose: 'registration', userId: user.id, sessionId, userHandle });
  return {
    rp: { id: rp.id, name: RP_NAME },
    user: { id: userHandle, name: user.email, displayName: user.name ?? user.email },
    challenge,
    pubKeyCredParams: ALGORITHMS.map((alg) => ({ type: 'public-key' as const, alg })),
    timeout: CHALLENGE_MS,
    excludeCredentials: await descriptorsOf(db, user.id),
    authenticatorSelection: { residentKey: 'required' as const, requireResidentKey: true, userVerification: 'required' as const },
    attestation: 'none' as const,
    hints: [] as Array<'hybrid' | 'security-key' | 'client-device'>,
    extensions: { credProps: true },
  };
}

/**
 * Request options. For a sign-in `userId` is null and `allowCredentials` empty (the browser
 * offers what it holds; nothing names an account); for a step-up they list the person's passkeys.
 */
export async function requestOptions(
  db: Executor,
  rp: RelyingParty,
  input: { purpose: 'authentication' | 'step_up'; userId: string | null; sessionId: string | null },
) {
  const challenge = await issueChallenge(db, input);
  return {
    challenge,
    timeout: CHALLENGE_MS,
    rpId: rp.id,
    allowCredentials: input.userId && input.purpose === 'step_up' ? await descriptorsOf(db, input.userId) : [],
    userVerification: 'required' as const,
    hints: [] as Array<'hybrid' | 'security-key' | 'client-device'>,
    extensions: {},
  };
}

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

export type RegistrationOutcome = { ok: true; passkeyId: string } | { ok: false; reason: 'challenge' | 'verification' | 'duplicate' };

/**
 * Checks a registration response against a challenge this session was given (origin, rpId,
 * user verification, algorithm) and stores the passkey. The library's messages say what did
 * not match; they go to the log, the person gets `verification_failed`.
 */
export async function registerPasskey(
  db: Executor,
  rp: RelyingParty,
  input: { userId: string; sessionId: string; name: string | null; response: unknown },
  log: (reason: string) => void,
  now = new Date(),
): Promise<RegistrationOutcome> {
  const response = input.response as RegistrationResponseJSON;
  const challenge = answeredChallenge(response);
  const redeemed = await redeemChallenge(db, challenge, ['registration'], input.sessionId, now);
  if (!redeemed.ok || redeemed.userId !== input.userId || !redeemed.userHandle) return { ok: false, reason: 'challenge' };
  let info;
  try {
    const verified = await verifyRegistrationResponse({
      response,
      expectedChallenge: challenge!,
      expectedOrigin: rp.origins,
      expectedRPID: rp.id,
      requireUserVerification: true,
      supportedAlgorithmIDs: [...ALGORITHMS],
    });
    if (!verified.verified) return { ok: false, reason: 'verification' };
    info = verified.registrationInfo;
  } catch (err) {
    log((err as Error).message);
    return { ok: false, reason: 'verification' };
  }
  const aaguid = info.aaguid === '00000000-0000-0000-0000-000000000000' ? null : info.aaguid;
  const known = authenticatorName(aaguid);
  const id = newId('passkey');
  const inserted = await db
    .insertInto('passkeys')
    .values({
      id,
      user_id: input.userId,
      name: input.name ?? known ?? DEFAULT_PASSKEY_NAME,
      credential_id: info.credential.id,
      public_key: base64url(info.credential.publicKey),
      counter: info.credential.counter,
      transports: (response.response.transports ?? []).filter((t) => TRANSPORTS.has(t)),
      backed_up: info.credentialBackedUp,
      backup_eligible: info.credentialDeviceType === 'multiDevice',
      authenticator_name: known,
      aaguid,
      // The handle the options gave the authenticator: it sends it back with every assertion.
      user_handle: redeemed.userHandle,
      created_at: now,
      updated_at: now,
    })
    // The same authenticator registered twice at once: one insert wins, the other is told.
    .onConflict((oc) => oc.column('credential_id').doNothing())
    .returning('id')
    .executeTakeFirst();
  if (!inserted) return { ok: false, reason: 'duplicate' };
  return { ok: true, passkeyId: id };
}

// ---------------------------------------------------------------------------------------
// Assertions
// ---------------------------------------------------------------------------------------

export type AssertionOutcome = { ok: true; userId: string; passkeyId: string } | { ok: false; reason: 'challenge' | 'verification' | 'counter' | 'not_yours' };

/**
 * Checks an assertion against a challenge of `purposes` bound to `sessionId`, with the stored
 * public key, and records the use. What it must match (WebAuthn §7.2):
 * - the credential is a stored passkey, of `userId` when the caller is known (a second factor,
 *   a step-up), and its user handle, when the authenticator sends one, is the owner's;
 * - origin, rpId, user verification and signature (the library);
 * - the signature counter: 0 means the authenticator keeps none (synced passkeys stay at 0),
 *   so only a non-zero counter that does not move past a non-zero stored one is refused (a
 *   cloned authenticator);
 * - backup eligibility cannot change; the backup state is kept current.
 */
export async function checkAssertion(
  db: Executor,
  rp: RelyingParty,
  input: { response: unknown; purposes: readonly ChallengePurpose[]; sessionId: string | null; userId: string | null },
  log: (reason: string) => void,
  now = new Date(),
): Promise<AssertionOutcome> {
  const response = input.response as AuthenticationResponseJSON;
  const challenge = answeredChallenge(response);
  const redeemed = await redeemChallenge(db, challenge, input.purposes, input.sessionId, now);
  if (!redeemed.ok) return { ok: false, reason: 'challenge' };
  if (redeemed.userId && input.userId && redeemed.userId !== input.userId) return { ok: false, reason: 'challenge' };
  const passkey =
    typeof response.id === 'string'
      ? await db.selectFrom('passkeys').selectAll().where('credential_id', '=', response.id).forUpdate().executeTakeFirst()
      : undefined;
  if (!passkey) return { ok: false, reason: 'verification' };
  if (input.userId && passkey.user_id !== input.userId) return { ok: false, reason: 'not_yours' };
  const handle = response.response?.userHandle;
  if (handle !== undefined && handle !== null && handle !== passkey.user_handle) {
    log('user handle does not match the passkey owner');
    return { ok: false, reason: 'verification' };
  }
  if (!input.userId && !handle) {
    // A sign-in names nobody but through the discoverable credential's handle.
    log('sign-in assertion without a user handle');
    return { ok: false, reason: 'verification' };
  }
  let info;
  try {
    const verified = await verifyAuthenticationResponse({
      response,
      expectedChallenge: challenge!,
      expectedOrigin: rp.origins,
      expectedRPID: rp.id,
      requireUserVerification: true,
      // The counter rule is ours (below): the library's refuses a 0 after a non-zero counter.
      credential: { id: passkey.credential_id, publicKey: Buffer.from(passkey.public_key, 'base64url'), counter: 0 },
    });
    if (!verified.verified) return { ok: false, reason: 'verification' };
    info = verified.authenticationInfo;
  } catch (err) {
    log((err as Error).message);
    return { ok: false, reason: 'verification' };
  }
  const stored = Number(passkey.counter);
  if (info.newCounter > 0 && stored > 0 && info.newCounter <= stored) {
    log(`signature counter went from ${stored} to ${info.newCounter}`);
    return { ok: false, reason: 'counter' };
  }
  if (passkey.backup_eligible !== (info.credentialDeviceType === 'multiDevice')) {
    log('backup eligibility changed since registration');
    return { ok: false, reason: 'verification' };
  }
  await db
    .updateTable('passkeys')
    .set({ counter: Math.max(stored, info.newCounter), backed_up: info.credentialBackedUp, last_used_at: now })
    .where('id', '=', passkey.id)
    .execute();
  return { ok: true, userId: passkey.user_id, passkeyId: passkey.id };
}

// ---------------------------------------------------------------------------------------
// The person's list
// ---------------------------------------------------------------------------------------

export const PASSKEY_COLUMNS = [
  'id',
  'name',
  'credential_id',
  'transports',
  'backed_up',
  'authenticator_name',
  'created_at',
  'updated_at',
  'last_used_at',
] as const;

export function passkeyView(row: {
  id: string;
  name: string;
  credential_id: string;
  transports: string[];
  backed_up: boolean;
  authenticator_name: string | null;
  created_at: Date;
  updated_at: Date;
  last_used_at: Date | null;
}) {
  return {
    id: row.id,
    name: row.name,
    credential_id: row.credential_id,
    transports: row.transports.filter((t) => TRANSPORTS.has(t)) as Transport[],
    backed_up: row.backed_up,
    authenticator_name: row.authenticator_name,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    last_used_at: row.last_used_at?.toISOString() ?? null,
  };
}
