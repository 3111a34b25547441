import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { promisify } from 'node:util';
import zlib from 'node:zlib';

type Coding = 'br' | 'gzip';

const brotli = promisify(zlib.brotliCompress);
const gzip = promisify(zlib.gzip);

/** Types that shrink when compressed (images here are PNG, JPEG and WebP: already compressed). */
const COMPRESSIBLE = /^(?:text\/|application\/(?:json|yaml|javascript|xml)\b|image\/svg\+xml)|\+(?:json|xml)\b/;
/** Below this, compression saves less than its headers cost. */
const MIN_COMPRESSED_BYTES = 1024;

/**
 * A body that is the same bytes for every request until it is replaced (this API's own
 * documents, the reference page's scripts, an organization's logo). It is sent with a strong
 * ETag and answered 304 when the client already holds it (`If-None-Match`); a type that
 * compresses goes out in brotli or gzip when the client accepts one, each made once, when
 * first asked for (the OpenAPI document: 1 MB as JSON, 140 KB in brotli).
 */
export class Representation {
  /** The ETag of the bytes as they are (a compressed variant's adds its coding). */
  readonly etag: string;
  private readonly tag: string;
  private readonly coded = new Map<Coding, Promise<Buffer>>();

  /** `hash`: a digest of the bytes already known (a stored SHA-256); worked out otherwise. */
  constructor(
    readonly bytes: Buffer,
    readonly contentType: string,
    hash?: string,
  ) {
    this.tag = hash ?? createHash('sha256').update(bytes).digest('base64url');
    this.etag = `"${this.tag}"`;
  }

  get compressible(): boolean {
    return this.bytes.length >= MIN_COMPRESSED_BYTES && COMPRESSIBLE.test(this.contentType);
  }

  etagOf(coding: Coding | null): string {
    // Strong validators must differ between codings of the same resource (RFC 9110 §8.8.3).
    return coding ? `"${this.tag}-${coding}"` : this.etag;
  }

  encoded(coding: Coding): Promise<Buffer> {
    let made = this.coded.get(coding);
    if (!made) {
      made =
        coding === 'br'
          ? brotli(this.bytes, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 9, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: this.bytes.length } })
          : gzip(this.bytes, { level: 9 });
      // A failure is not remembered: the next request tries again.
      made.catch(() => this.coded.delete(coding));
      this.coded.set(coding, made);
    }
    return made;
  }
}

/** The coding to send for an `Accept-Encoding`: brotli, else gzip, else none (q=0 refuses one; `*` accepts the rest). */
export function chooseCoding(acceptEncoding: string | undefined): Coding | null {
  if (!acceptEncoding) return null;
  const weights = new Map<string, number>();
  for (const part of acceptEncoding.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const q = params.map((p) => /^\s*q\s*=\s*([0-9.]+)\s*$/.exec(p)?.[1]).find((v) => v !== undefined);
    const weight = q === undefined ? 1 : Number(q);
    weights.set(name.trim(), Number.isFinite(weight) ? weight : 0);
  }
  const weight = (coding: Coding) => weights.get(coding) ?? weights.get('*') ?? 0;
  const br = weight('br');
  const gz = weight('gzip');
  if (br > 0 && br >= gz) return 'br';
  if (gz > 0) return 'gzip';
  return null;
}

/** Whether an `If-None-Match` names `etag` (weak comparison, as RFC 9110 §13.1.2 asks), or is `*`. */
export function noneMatch(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch.split(',').some((candidate) => {
    const tag = candidate.trim();
    return tag === '*' || tag.replace(/^W\//, '') === etag;
  });
}

/**
 * Sends a representation with `headers` (cache policy and the like): 304 without a body when
 * the client holds these bytes, else 200 with them, compressed when that pays and the client
 * accepts it.
 */
export async function sendRepresentation(
  req: IncomingMessage,
  res: ServerResponse,
  representation: Representation,
  headers: Record<string, string | number | readonly string[]> = {},
): Promise<void> {
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  const compressible = representation.compressible;
  const coding = compressible ? chooseCoding(req.headers['accept-encoding']) : null;
  const etag = representation.etagOf(coding);
  res.setHeader('ETag', etag);
  if (compressible) res.setHeader('Vary', 'Accept-Encoding');
  if (noneMatch(req.headers['if-none-match'], etag)) {
    res.statusCode = 304;
    res.end();
    return;
  }
  const body = coding ? await representation.encoded(coding) : representation.bytes;
  res.statusCode = 200;
  res.setHeader('Content-Type', representation.contentType);
  res.setHeader('Content-Length', body.length);
  if (coding) res.setHeader('Content-Encoding', coding);
  res.end(req.method === 'HEAD' ? undefined : body);
}
