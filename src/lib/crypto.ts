import * as crypto from 'node:crypto';
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

// One-shot hashing (Node 20.12+) spares a Hash object per call: credentials are hashed on every request.
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'hex') => string }).hash;

/** SHA-256 of a credential, hex. Tokens and session secrets are stored only as this. */
export function hashSecret(secret: string): string {
  return oneShot ? oneShot('sha256', secret, 'hex') : createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** A random credential: a readable prefix and 32 random bytes in base64url. */
export function randomSecret(prefix: string): string {
  return `${prefix}_${randomBytes(32).toString('base64url')}`;
}

/** A key that seals secrets, named by a short fingerprint so a sealed value says which key it needs. */
export interface SealingKey {
  id: string;
  key: Buffer;
}

export function sealingKey(key: Buffer): SealingKey {
  if (key.length !== 32) throw new Error('An encryption key is 32 bytes.');
  return { id: createHash('sha256').update(key).digest('hex').slice(0, 8), key };
}

/**
 * Encrypts secrets at rest (webhook URLs, TOTP seeds, client secrets) with AES-256-GCM.
 * The output is `v2.<key id>.<iv>.<tag>.<ciphertext>` in base64url: the key id lets keys
 * rotate (the current key seals, older ones still open what they sealed, and `cli secrets
 * reseal` moves everything to the current key). `v1` values, from before key ids, are tried
 * with every key. The associated data binds a ciphertext to its row and column, so one
 * secret cannot be pasted into another row.
 */
export class SecretBox {
  private readonly byId: Map<string, Buffer>;

  constructor(
    private readonly current: SealingKey,
    older: readonly SealingKey[] = [],
  ) {
    this.byId = new Map([current, ...older].map((k) => [k.id, k.key]));
  }

  get currentKeyId(): string {
    return this.current.id;
  }

  seal(plaintext: string, context: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.current.key, iv);
    cipher.setAAD(Buffer.from(context, 'utf8'));
    const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return ['v2', this.current.id, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), data.toString('base64url')].join('.');
  }

  /** The key id a sealed value names, or null for a `v1` value (sealed before key ids). */
  static keyIdOf(sealed: string): string | null {
    return sealed.startsWith('v2.') ? (sealed.split('.')[1] ?? null) : null;
  }

  open(sealed: string, context: string): string {
    const parts = sealed.split('.');
    if (parts[0] === 'v2' && parts.length === 5) {
      const [, keyId, iv, tag, data] = parts as [string, string, string, string, string];
      const key = this.byId.get(keyId);
      if (!key) throw new Error(`The secret was sealed with key ${keyId}, which this server does not have (see ENCRYPTION_KEYS).`);
      return decrypt(key, iv, tag, data, context);
    }
    if (parts[0] === 'v1' && parts.length === 4) {
      const [, iv, tag, data] = parts as [string, string, string, string];
      for (const key of this.byId.values()) {
        try {
          return decrypt(key, iv, tag, data, context);
        } catch {
          // Another key may have sealed it.
        }
      }
      throw new Error('No key this server has opens the secret (see ENCRYPTION_KEYS).');
    }
    throw new Error('Unknown secret format.');
  }
}

function decrypt(key: Buffer, iv: string, tag: string, data: string, context: string): string {
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
  decipher.setAAD(Buffer.from(context, 'utf8'));
  decipher.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]).toString('utf8');
}

/** The box for the configured keys: the first seals, all open. */
export function secretBoxOf(keys: { current: Buffer; older: readonly Buffer[] }): SecretBox {
  return new SecretBox(sealingKey(keys.current), keys.older.map(sealingKey));
}
