import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';

/**
 * A software authenticator for tests over HTTP: a real P-256 key pair that makes
 * registration responses (`fmt: none`) and signed assertions as WebAuthn Level 3 defines them
 * (authenticator data, client data, ECDSA over both), with the origin and counter the test
 * chooses. The server checks them with @simplewebauthn/server as it checks a browser's; the
 * browser tests drive Chromium's own virtual authenticator instead.
 */

type Cbor = number | string | Uint8Array | Map<Cbor, Cbor> | { [key: string]: Cbor };

function head(major: number, value: number): Buffer {
  if (value < 24) return Buffer.from([(major << 5) | value]);
  if (value < 256) return Buffer.from([(major << 5) | 24, value]);
  if (value < 65536) return Buffer.from([(major << 5) | 25, value >> 8, value & 0xff]);
  const b = Buffer.alloc(5);
  b[0] = (major << 5) | 26;
  b.writeUInt32BE(value, 1);
  return b;
}

/** The few CBOR forms WebAuthn needs (RFC 8949): integers, byte and text strings, maps. */
export function cbor(value: Cbor): Buffer {
  if (typeof value === 'number') return value >= 0 ? head(0, value) : head(1, -1 - value);
  if (typeof value === 'string') {
    const bytes = Buffer.from(value, 'utf8');
    return Buffer.concat([head(3, bytes.length), bytes]);
  }
  if (value instanceof Uint8Array) return Buffer.concat([head(2, value.length), Buffer.from(value)]);
  const entries = value instanceof Map ? [...value.entries()] : Object.entries(value);
  return Buffer.concat([head(5, entries.length), ...entries.flatMap(([k, v]) => [cbor(k), cbor(v)])]);
}

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest();
const b64u = (data: Buffer | Uint8Array) => Buffer.from(data).toString('base64url');

export interface SoftPasskey {
  credentialId: Buffer;
  privateKey: KeyObject;
  userHandle: string;
  rpId: string;
  counter: number;
}

export class SoftAuthenticator {
  readonly passkeys: SoftPasskey[] = [];
  constructor(
    /** Backup eligible and backed up (a synced passkey) or not (a device-bound key). */
    readonly synced = false,
    readonly aaguid = Buffer.alloc(16),
  ) {}

  private flags(extra: number): number {
    // UP (0x01) and UV (0x04) always: the server requires user verification.
    return 0x01 | 0x04 | (this.synced ? 0x08 | 0x10 : 0) | extra;
  }

  /** Answers creation options as `navigator.credentials.create()` would, from `origin`. */
  create(options: { rp: { id: string }; user: { id: string }; challenge: string }, origin: string) {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwk = publicKey.export({ format: 'jwk' });
    const cose = cbor(
      new Map<Cbor, Cbor>([
        [1, 2],
        [3, -7],
        [-1, 1],
        [-2, Buffer.from(jwk.x!, 'base64url')],
        [-3, Buffer.from(jwk.y!, 'base64url')],
      ]),
    );
    const credentialId = randomBytes(16);
    const passkey: SoftPasskey = { credentialId, privateKey, userHandle: options.user.id, rpId: options.rp.id, counter: 0 };
    this.passkeys.push(passkey);
    const length = Buffer.alloc(2);
    length.writeUInt16BE(credentialId.length);
    const authData = Buffer.concat([sha256(options.rp.id), Buffer.from([this.flags(0x40)]), Buffer.alloc(4), this.aaguid, length, credentialId, cose]);
    const clientData = JSON.stringify({ type: 'webauthn.create', challenge: options.challenge, origin, crossOrigin: false });
    return {
      id: b64u(credentialId),
      rawId: b64u(credentialId),
      type: 'public-key',
      authenticatorAttachment: 'platform',
      response: {
        clientDataJSON: b64u(Buffer.from(clientData)),
        attestationObject: b64u(cbor({ fmt: 'none', attStmt: {}, authData })),
        transports: ['internal'],
      },
      clientExtensionResults: { credProps: { rk: true } },
    };
  }

  /**
   * Answers request options as `navigator.credentials.get()` would: with `passkey` (the first
   * by default), its counter moved on by `step` (0: an authenticator that keeps no counter).
   */
  get(
    options: { challenge: string; rpId: string },
    origin: string,
    input: { passkey?: SoftPasskey; step?: number; userHandle?: string | null; counter?: number } = {},
  ) {
    const passkey = input.passkey ?? this.passkeys[0]!;
    if (input.counter !== undefined) passkey.counter = input.counter;
    else passkey.counter += input.step ?? 1;
    const counter = Buffer.alloc(4);
    counter.writeUInt32BE(passkey.counter);
    const authData = Buffer.concat([sha256(options.rpId), Buffer.from([this.flags(0)]), counter]);
    const clientData = Buffer.from(JSON.stringify({ type: 'webauthn.get', challenge: options.challenge, origin, crossOrigin: false }));
    const signature = sign('sha256', Buffer.concat([authData, sha256(clientData)]), passkey.privateKey);
    const userHandle = input.userHandle === undefined ? passkey.userHandle : input.userHandle;
    return {
      id: b64u(passkey.credentialId),
      rawId: b64u(passkey.credentialId),
      type: 'public-key',
      authenticatorAttachment: 'platform',
      response: {
        clientDataJSON: b64u(clientData),
        authenticatorData: b64u(authData),
        signature: b64u(signature),
        ...(userHandle === null ? {} : { userHandle }),
      },
      clientExtensionResults: {},
    };
  }
}
