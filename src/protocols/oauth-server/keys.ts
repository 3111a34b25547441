import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, verify, type JsonWebKey, type KeyObject } from 'node:crypto';
import type { Db } from '../../db/database';
import type { SecretBox } from '../../lib/crypto';

/**
 * The keys this authorization server signs access and ID tokens with (ES256 on P-256), kept in
 * the database so that every replica signs and verifies with the same ones: the private half
 * sealed with the encryption keys, the public half published at /oauth/jwks. The newest key
 * signs; a retired key stays published until the tokens it signed have expired.
 */
export interface SigningKey {
  kid: string;
  privateKey: KeyObject;
}

export const signingKeyContext = (kid: string) => `oauth-signing-key:${kid}`;
/** A retired key is published this long after it stopped signing: longer than any token it signed lives. */
const RETIRED_KEY_PUBLISHED_MS = 24 * 3600_000;

export interface PublishedJwk {
  kty: 'EC';
  crv: 'P-256';
  x: string;
  y: string;
  kid: string;
  use: 'sig';
  alg: 'ES256';
}

/** How long a replica signs with the key it read before looking again (an operator may have rotated it). */
const CURRENT_KEY_TTL_MS = 5 * 60_000;

export class SigningKeys {
  private current: Promise<SigningKey> | null = null;
  private readAt = 0;

  constructor(
    private readonly db: Db,
    private readonly secrets: SecretBox,
  ) {}

  /** The key that signs now: the newest unretired one, made on first use. */
  signing(now = Date.now()): Promise<SigningKey> {
    if (this.current && now - this.readAt > CURRENT_KEY_TTL_MS) this.current = null;
    if (!this.current) this.readAt = now;
    this.current ??= this.loadOrCreate().catch((err: unknown) => {
      this.current = null;
      throw err;
    });
    return this.current;
  }

  private async loadOrCreate(): Promise<SigningKey> {
    const found = await this.db
      .selectFrom('oauth_signing_keys')
      .select(['kid', 'private_jwk_enc'])
      .where('retired_at', 'is', null)
      .orderBy('created_at', 'desc')
      .executeTakeFirst();
    if (found)
      return {
        kid: found.kid,
        privateKey: createPrivateKey({ key: JSON.parse(this.secrets.open(found.private_jwk_enc, signingKeyContext(found.kid))) as JsonWebKey, format: 'jwk' }),
      };
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const kid = `k_${new Date().toISOString().slice(0, 10)}_${randomBytes(4).toString('hex')}`;
    await this.db
      .insertInto('oauth_signing_keys')
      .values({
        kid,
        private_jwk_enc: this.secrets.seal(JSON.stringify(privateKey.export({ format: 'jwk' })), signingKeyContext(kid)),
        public_jwk: JSON.stringify(publicKey.export({ format: 'jwk' })),
      })
      .execute();
    // Two replicas starting at once may each make one; both are published, the newest signs.
    return this.loadOrCreate();
  }

  /** The public keys to publish (JWKS): the signing key and recently retired ones. */
  async published(now = new Date()): Promise<PublishedJwk[]> {
    await this.signing();
    const rows = await this.db
      .selectFrom('oauth_signing_keys')
      .select(['kid', 'public_jwk'])
      .where((eb) => eb.or([eb('retired_at', 'is', null), eb('retired_at', '>', new Date(now.getTime() - RETIRED_KEY_PUBLISHED_MS))]))
      .orderBy('created_at', 'desc')
      .execute();
    return rows.map((row) => {
      const jwk = row.public_jwk as JsonWebKey;
      return { kty: 'EC', crv: 'P-256', x: String(jwk.x), y: String(jwk.y), kid: row.kid, use: 'sig', alg: 'ES256' };
    });
  }
}

// A key id names one key for ever (they are random), so what was read once is kept.
const publicKeys = new Map<string, KeyObject>();

/** The public key named by a token's `kid`, or null for one this server never made. */
async function publicKeyOf(db: Db, kid: string): Promise<KeyObject | null> {
  const known = publicKeys.get(kid);
  if (known) return known;
  const row = await db.selectFrom('oauth_signing_keys').select('public_jwk').where('kid', '=', kid).executeTakeFirst();
  if (!row) return null;
  const key = createPublicKey({ key: row.public_jwk as JsonWebKey, format: 'jwk' });
  publicKeys.set(kid, key);
  return key;
}

const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** A compact JWS (ES256) of the claims, with `typ` (`at+jwt` for access tokens, RFC 9068; `JWT` for ID tokens). */
export function signJwt(key: SigningKey, typ: string, claims: Record<string, unknown>): string {
  const input = `${encode({ alg: 'ES256', typ, kid: key.kid })}.${encode(claims)}`;
  const signature = sign('sha256', Buffer.from(input), { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  return `${input}.${signature.toString('base64url')}`;
}

/**
 * The claims of a compact JWS this server signed, or null: a token of another form, signed with
 * another algorithm or by a key this server does not have, or with a bad signature. Expiry and
 * audience are the caller's to check.
 */
export async function verifiedJwt(db: Db, token: string, typ: string): Promise<Record<string, unknown> | null> {
  const parts = token.split('.');
  if (parts.length !== 3) return null;
  const [head, body, signature] = parts as [string, string, string];
  let header: { alg?: unknown; typ?: unknown; kid?: unknown };
  let claims: unknown;
  try {
    header = JSON.parse(Buffer.from(head, 'base64url').toString('utf8')) as typeof header;
    claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
  } catch {
    return null;
  }
  if (header.alg !== 'ES256' || header.typ !== typ || typeof header.kid !== 'string' || typeof claims !== 'object' || claims === null) return null;
  const key = await publicKeyOf(db, header.kid);
  if (!key) return null;
  const valid = verify('sha256', Buffer.from(`${head}.${body}`), { key, dsaEncoding: 'ieee-p1363' }, Buffer.from(signature, 'base64url'));
  return valid ? (claims as Record<string, unknown>) : null;
}

const perApp = new WeakMap<object, SigningKeys>();

/** The app's signing keys (one set per app: its database and encryption keys). */
export function signingKeysOf(deps: { db: Db; secrets: SecretBox }): SigningKeys {
  let keys = perApp.get(deps);
  if (!keys) {
    keys = new SigningKeys(deps.db, deps.secrets);
    perApp.set(deps, keys);
  }
  return keys;
}

/**
 * Retires the signing keys in use: the next token is signed with a new key (each replica picks
 * it up within CURRENT_KEY_TTL_MS), and the retired ones stay published for a day so that
 * tokens they signed still verify elsewhere. Answers the retired key ids.
 */
export async function retireSigningKeys(db: Db, now = new Date()): Promise<string[]> {
  const retired = await db.updateTable('oauth_signing_keys').set({ retired_at: now }).where('retired_at', 'is', null).returning('kid').execute();
  return retired.map((row) => row.kid);
}
