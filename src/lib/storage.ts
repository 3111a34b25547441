import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type * as ClientS3 from '@aws-sdk/client-s3';
import type * as LibStorage from '@aws-sdk/lib-storage';
import { DependencyUnavailableError, isUnreachable } from './unavailable';

/**
 * The AWS SDK, loaded on first use: it takes most of a second to load, which a deployment
 * keeping its files on the disk (and every test of it) never needs to spend.
 */
/* eslint-disable @typescript-eslint/no-require-imports */
const s3Sdk = () => require('@aws-sdk/client-s3') as typeof ClientS3;
const uploads = () => require('@aws-sdk/lib-storage') as typeof LibStorage;
/* eslint-enable @typescript-eslint/no-require-imports */

/** Where stored bytes (tool files, logos) live: a folder under DATA_DIR, or an S3-compatible bucket shared by every replica. */
export type StorageConfig =
  | { backend: 'disk' }
  | {
      backend: 's3';
      bucket: string;
      /** An S3-compatible endpoint (MinIO, R2, Ceph…); null: AWS's for the region. */
      endpoint: string | null;
      region: string;
      /** null: the AWS SDK's default chain (environment, profile, instance role). */
      credentials: { accessKeyId: string; secretAccessKey: string } | null;
      /** Bucket in the path (`endpoint/bucket/key`) rather than the host name: what most S3-compatible servers need. */
      forcePathStyle: boolean;
      /** Prepended to every key, so that one bucket can serve several deployments. */
      prefix: string;
    };

/** What was stored: the bytes' count and SHA-256 (lowercase hex), computed as they went through. */
export interface StoredBytes {
  size: number;
  sha256: string;
}

/**
 * Where the service keeps bytes that do not belong in the database (organization logos,
 * tool files), addressed by key. One interface, so that a deployment can put them in an
 * object store without the areas noticing; the default is a folder under DATA_DIR.
 */
export interface Storage {
  /** Stores the bytes under the key, replacing what was there. */
  put(key: string, bytes: Buffer): Promise<void>;
  /** The bytes under the key, or null when there are none. */
  get(key: string): Promise<Buffer | null>;
  /**
   * Stores what `source` yields under the key, a chunk at a time (never the whole in
   * memory), hashing it on the way. `size`, when known, is the exact length (an object
   * store is then sent one plain PUT). When `source` fails, nothing is kept under the key and
   * the promise rejects with the source's error.
   */
  putStream(key: string, source: Readable, options?: { size?: number }): Promise<StoredBytes>;
  /** The bytes under the key as a stream, or null when there are none. */
  getStream(key: string): Promise<Readable | null>;
  /** Removes the key; removing what is not there is not an error. */
  delete(key: string): Promise<void>;
  /** Whether the key holds bytes (for checks and tests). */
  has(key: string): Promise<boolean>;
}

/** Keys are paths of plain segments (`organization/org_…/logo/9f86…`): nothing that could leave the folder. */
const KEY = /^[A-Za-z0-9_-]+(?:\/[A-Za-z0-9_.-]+)*$/;

function checkKey(key: string): void {
  if (!KEY.test(key) || key.split('/').some((segment) => segment === '.' || segment === '..')) {
    throw new Error(`Storage key ${JSON.stringify(key)} is not a path of plain segments.`);
  }
}

/** Counts and hashes the bytes going through. */
class Digesting extends Transform {
  private readonly hash = createHash('sha256');
  // Not `size`: lib-storage reads a body's `size` as its length.
  private counted = 0;
  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.counted += chunk.length;
    this.hash.update(chunk);
    done(null, chunk);
  }
  result(): StoredBytes {
    return { size: this.counted, sha256: this.hash.digest('hex') };
  }
}

/**
 * The source piped through a Digesting; the first error of the source is remembered, so
 * that a failed store reports why the bytes were refused (413, a size mismatch) rather than
 * how the writer noticed (a closed stream, an aborted request).
 */
function digest(source: Readable): { through: Digesting; sourceError: () => unknown; aborted: AbortSignal } {
  const through = new Digesting();
  const abort = new AbortController();
  let failed: unknown;
  source.on('error', (err) => {
    failed ??= err;
    // A writer that reads `through` (an HTTP request body) may not notice it ending early: told here.
    abort.abort(err);
    through.destroy(err);
  });
  // The source's error is the one reported (sourceError); the writer learns of it by the abort or its own pipe.
  through.on('error', () => undefined);
  source.pipe(through);
  return { through, sourceError: () => failed, aborted: abort.signal };
}

/**
 * Storage on the local disk, in `root` (DATA_DIR/storage): folders 0700, files 0600, written
 * to a temporary name and renamed so that a reader never sees half a file.
 */
export class DiskStorage implements Storage {
  constructor(readonly root: string) {}

  private path(key: string): string {
    checkKey(key);
    const path = resolve(this.root, ...key.split('/'));
    if (!path.startsWith(resolve(this.root) + sep)) throw new Error(`Storage key ${key} leaves the storage folder.`);
    return path;
  }

  private async temporary(key: string): Promise<{ path: string; temporary: string }> {
    const path = this.path(key);
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const temporary = `${path}.${createHash('sha256').update(`${process.pid}:${Date.now()}:${Math.random()}`).digest('hex').slice(0, 12)}.tmp`;
    return { path, temporary };
  }

  async put(key: string, bytes: Buffer): Promise<void> {
    const { path, temporary } = await this.temporary(key);
    await writeFile(temporary, bytes, { mode: 0o600 });
    await rename(temporary, path);
  }

  async putStream(key: string, source: Readable): Promise<StoredBytes> {
    // Listening before anything is awaited: a source that fails meanwhile is heard.
    const { through, sourceError } = digest(source);
    let temporary: string | null = null;
    try {
      const place = await this.temporary(key);
      temporary = place.temporary;
      const path = place.path;
      await pipeline(through, createWriteStream(temporary, { mode: 0o600 }));
      await rename(temporary, path);
      return through.result();
    } catch (err) {
      if (temporary) await rm(temporary, { force: true });
      throw sourceError() ?? err;
    }
  }

  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.path(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async getStream(key: string): Promise<Readable | null> {
    // Opened first, so that a missing file is null here rather than an error mid-response.
    let handle;
    try {
      handle = await open(this.path(key), 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    return createReadStream('', { fd: handle, autoClose: true, highWaterMark: 64 * 1024 });
  }

  async delete(key: string): Promise<void> {
    await rm(this.path(key), { force: true });
  }

  async has(key: string): Promise<boolean> {
    try {
      return (await stat(this.path(key))).isFile();
    } catch {
      return false;
    }
  }
}

/** Parts of a multipart upload of unknown length: S3's least, and what one transfer holds in memory at most. */
const PART_BYTES = 5 * 1024 * 1024;
const CONNECT_TIMEOUT_MS = 5_000;
const IDLE_TIMEOUT_MS = 60_000;

/** The bucket's failures that mean "not now" (network, timeouts, 5xx) become a 503 for the caller. */
function unavailableOr(err: unknown): unknown {
  return isUnreachable(err) ? new DependencyUnavailableError('The file storage', err) : err;
}

/**
 * Storage in an S3-compatible bucket (AWS S3, MinIO, R2, Ceph…), which every replica of a
 * deployment shares. Bytes of known length go up as one streamed PutObject (nothing held in
 * memory); of unknown length, as a multipart upload a part at a time.
 */
export class S3Storage implements Storage {
  readonly client: ClientS3.S3Client;
  private readonly bucket: string;
  private readonly prefix: string;

  constructor(config: Extract<StorageConfig, { backend: 's3' }>) {
    this.client = new (s3Sdk().S3Client)({
      region: config.region,
      ...(config.endpoint ? { endpoint: config.endpoint } : {}),
      forcePathStyle: config.forcePathStyle,
      ...(config.credentials ? { credentials: config.credentials } : {}),
      // Checksums only where S3 requires them: the default (a CRC trailer in aws-chunked
      // encoding on every PUT) is not understood by every S3-compatible server, and the
      // SHA-256 we compute ourselves is what the bytes are checked by.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      // A bucket that stops answering fails the request (503 to our caller) instead of holding
      // it open: connecting may take seconds, a transfer may idle for a minute at most.
      requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, requestTimeout: IDLE_TIMEOUT_MS },
    });
    this.bucket = config.bucket;
    this.prefix = config.prefix === '' ? '' : `${config.prefix}/`;
  }

  private key(key: string): string {
    checkKey(key);
    return this.prefix + key;
  }

  async put(key: string, bytes: Buffer): Promise<void> {
    await this.client
      .send(new (s3Sdk().PutObjectCommand)({ Bucket: this.bucket, Key: this.key(key), Body: bytes, ContentLength: bytes.length }))
      .catch((err) => Promise.reject(unavailableOr(err)));
  }

  async putStream(key: string, source: Readable, options: { size?: number } = {}): Promise<StoredBytes> {
    const objectKey = this.key(key);
    const { through, sourceError, aborted } = digest(source);
    try {
      if (options.size !== undefined) {
        await this.client.send(new (s3Sdk().PutObjectCommand)({ Bucket: this.bucket, Key: objectKey, Body: through, ContentLength: options.size }), {
          abortSignal: aborted,
        });
      } else {
        const upload = new (uploads().Upload)({
          client: this.client,
          params: { Bucket: this.bucket, Key: objectKey, Body: through },
          queueSize: 1,
          partSize: PART_BYTES,
        });
        aborted.addEventListener('abort', () => void upload.abort().catch(() => undefined));
        await upload.done();
      }
    } catch (err) {
      // Not every S3-compatible server drops a PUT whose body stopped short.
      await this.delete(key).catch(() => undefined);
      throw sourceError() ?? unavailableOr(err);
    }
    // A source that failed after its last byte was sent: what was stored is not what was meant.
    const failed = sourceError();
    if (failed) {
      await this.delete(key).catch(() => undefined);
      throw failed;
    }
    return through.result();
  }

  async get(key: string): Promise<Buffer | null> {
    const stream = await this.getStream(key);
    if (!stream) return null;
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  async getStream(key: string): Promise<Readable | null> {
    try {
      const answer = await this.client.send(new (s3Sdk().GetObjectCommand)({ Bucket: this.bucket, Key: this.key(key) }));
      return answer.Body instanceof Readable ? answer.Body : null;
    } catch (err) {
      if (missing(err)) return null;
      throw unavailableOr(err);
    }
  }

  async delete(key: string): Promise<void> {
    await this.client.send(new (s3Sdk().DeleteObjectCommand)({ Bucket: this.bucket, Key: this.key(key) })).catch((err) => Promise.reject(unavailableOr(err)));
  }

  async has(key: string): Promise<boolean> {
    try {
      await this.client.send(new (s3Sdk().HeadObjectCommand)({ Bucket: this.bucket, Key: this.key(key) }));
      return true;
    } catch (err) {
      if (missing(err)) return false;
      throw unavailableOr(err);
    }
  }
}

const missing = (err: unknown) => {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return e.name === 'NoSuchKey' || e.name === 'NotFound' || e.$metadata?.httpStatusCode === 404;
};

const byPlace = new Map<string, Storage>();

/** The deployment's storage: one per data folder or bucket, shared by every area of the process. */
export function storageOf(config: { dataDir: string; files?: { storage: StorageConfig } }): Storage {
  const place = config.files?.storage ?? { backend: 'disk' as const };
  const name = place.backend === 'disk' ? join(config.dataDir, 'storage') : `s3:${place.endpoint ?? place.region}/${place.bucket}/${place.prefix}`;
  let storage = byPlace.get(name);
  if (!storage) {
    storage = place.backend === 'disk' ? new DiskStorage(name) : new S3Storage(place);
    byPlace.set(name, storage);
  }
  return storage;
}
