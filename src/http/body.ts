import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import Busboy, { type BusboyHeaders } from '@fastify/busboy';
import express, { type Request, type Response } from 'express';
import type { OperationMeta } from '../spec/operations';
import { ApiError, validationError } from './errors';
import type { UploadedFile, UploadStream } from './handler-types';

export interface BodyLimits {
  /** JSON and form bodies, parsed in memory. */
  parsedBytes: number;
  /** Raw uploads and multipart files, streamed: never held whole in memory. */
  uploadBytes: number;
}

export interface ReadBody {
  /** What the handler receives. */
  body: unknown;
  /** What is validated against the schema (file parts stand in as their filename); undefined for streams. */
  validated: unknown;
  /** Removes what the body left on disk (spooled multipart files); runs when the response is done. */
  cleanup(): Promise<void>;
}

type Kind = 'json' | 'form' | 'multipart' | 'raw';

const kindOf = (media: string): Kind =>
  media === 'application/json' || /^application\/[\w.-]+\+json$/.test(media)
    ? 'json'
    : media === 'application/x-www-form-urlencoded'
      ? 'form'
      : media === 'multipart/form-data'
        ? 'multipart'
        : 'raw';

const matches = (declared: string, type: string) =>
  declared === type || declared === '*/*' || (declared.endsWith('/*') && type.startsWith(declared.slice(0, -1)));

const nothing: ReadBody = { body: undefined, validated: undefined, cleanup: async () => undefined };

/** Half of a UTF-16 surrogate pair without the other half: JSON can carry it (`"\ud800"`), text cannot. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * 400 for a string (or member name) holding a lone surrogate, with its pointer: no character
 * encoding can store or send it (PostgreSQL refuses it in jsonb, encodeURIComponent throws).
 */
function refuseLoneSurrogates(body: unknown): void {
  // A stack, not recursion: a body may nest thousands deep.
  const pending: [unknown, string][] = [[body, '']];
  while (pending.length > 0) {
    const [value, pointer] = pending.pop() as [unknown, string];
    if (typeof value === 'string') {
      if (LONE_SURROGATE.test(value)) throw validationError([{ in: 'body', pointer, message: 'holds half of a UTF-16 surrogate pair, which is no character' }]);
    } else if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i += 1) pending.push([value[i], `${pointer}/${i}`]);
    } else if (value && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        const at = `${pointer}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
        if (LONE_SURROGATE.test(key)) throw validationError([{ in: 'body', pointer: at, message: 'is a member name holding half of a UTF-16 surrogate pair' }]);
        pending.push([item, at]);
      }
    }
  }
}

/** Whether a body left something behind to remove once the response is done. */
export const leavesSomething = (body: ReadBody): boolean => body.cleanup !== nothing.cleanup;

/** Express body-parser failures, recognised by the `type` the parser sets. */
export function fromParserError(err: { type?: string; status?: number; limit?: number }): ApiError | null {
  if (err.type === 'entity.parse.failed') return new ApiError('malformed_json', 'The body is not well-formed JSON.');
  if (err.type === 'entity.too.large') return new ApiError('payload_too_large', `The body is larger than the limit of ${err.limit} bytes.`);
  if (err.type === 'encoding.unsupported' || err.type === 'charset.unsupported') {
    return new ApiError('unsupported_media_type', 'Send the body as UTF-8.');
  }
  if (err.type === 'request.aborted') return new ApiError('validation_failed', 'The body ended early.');
  if (err.type === 'parameters.too.many') return new ApiError('payload_too_large', 'The form has too many fields.');
  return null;
}

/**
 * A parser's 4xx without a `type`: the body did not decompress as its Content-Encoding says
 * (zlib's Z_DATA_ERROR, brotli's format errors).
 */
function undecodable(err: unknown): ApiError | null {
  const status = (err as { status?: unknown }).status;
  if (typeof status !== 'number' || status < 400 || status >= 500) return null;
  return new ApiError(
    'malformed_json',
    'The body could not be decoded as its Content-Encoding says; send it compressed that way, or uncompressed without the header.',
  );
}

function parseWith(parser: express.RequestHandler, req: Request, res: Response): Promise<unknown> {
  return new Promise((resolve, reject) => {
    parser(req, res, (err?: unknown) => (err ? reject(fromParserError(err as { type?: string }) ?? undecodable(err) ?? err) : resolve(req.body)));
  });
}

/** A body sent as is (no Content-Encoding) in UTF-8 (no charset, or utf-8): what nearly every client sends. */
function plainUtf8(req: Request): boolean {
  if (req.headers['content-encoding'] !== undefined) return false;
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers['content-type'] ?? '')?.[1]?.toLowerCase();
  return charset === undefined || charset === 'utf-8' || charset === 'utf8';
}

/**
 * A plain UTF-8 JSON body read and parsed here, as body-parser would (any JSON value, a
 * leading BOM dropped, an empty body as {}), without building a parser per request: the
 * MCP endpoint's every message comes this way. Compressed or other-charset bodies go
 * through body-parser.
 */
function readJson(req: Request, cap: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (outcome: () => void) => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('aborted', onAborted);
      req.off('error', onError);
      outcome();
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > cap) {
        // The rest is left to the router, which drains it (bounded) before it answers 413.
        req.pause();
        finish(() => reject(tooLarge(cap)));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () =>
      finish(() => {
        let text = (chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size)).toString('utf8');
        if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
        if (text.trim() === '') return resolve({});
        try {
          resolve(JSON.parse(text));
        } catch {
          reject(new ApiError('malformed_json', 'The body is not well-formed JSON.'));
        }
      });
    const onAborted = () => finish(() => reject(new ApiError('validation_failed', 'The body ended early.')));
    const onError = (err: Error) => finish(() => reject(err));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('aborted', onAborted);
    req.on('error', onError);
  });
}

/**
 * The most of an unread body read and dropped before a refusal is sent. A client writes its
 * whole body before it reads the answer (node:http, fetch, curl): a server that answers 413
 * and closes while bytes are still coming makes the client fail writing (EPIPE, ECONNRESET)
 * without ever seeing the 413. Past these bounds the connection is closed anyway.
 */
export const DRAIN_MAX_BYTES = 16 * 1024 * 1024;
/** The longest the rest of a refused body is read for (a slow sender is not waited for). */
export const DRAIN_MAX_MS = 10_000;

/**
 * Reads and drops what is left of the request body, up to DRAIN_MAX_BYTES and DRAIN_MAX_MS;
 * resolves when it ended (`req.complete`) or a bound was reached (it then stays unread).
 */
export function drainRequest(req: Request, maxBytes = DRAIN_MAX_BYTES, maxMs = DRAIN_MAX_MS): Promise<void> {
  if (req.complete || req.destroyed || req.readableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    let seen = 0;
    const stop = () => {
      clearTimeout(timer);
      req.off('data', onData);
      for (const event of ['end', 'close', 'aborted', 'error'] as const) req.off(event, stop);
      if (!req.complete) req.pause();
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > maxBytes) stop();
    };
    const timer = setTimeout(stop, maxMs);
    timer.unref();
    // Whatever it was piped into (a parser that gave up, an upload nobody read) would hold it back.
    req.unpipe();
    req.on('data', onData);
    for (const event of ['end', 'close', 'aborted', 'error'] as const) req.once(event, stop);
    req.resume();
  });
}

const tooLarge = (limit: number) => new ApiError('payload_too_large', `The body is larger than the limit of ${limit} bytes.`);

/** Passes bytes through until there are more than `limit`, then fails with 413. */
class ByteCap extends Transform {
  private seen = 0;
  constructor(private readonly limit: number) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.seen += chunk.length;
    if (this.seen > this.limit) done(tooLarge(this.limit));
    else done(null, chunk);
  }
}

function uploadStream(req: Request, contentType: string, limit: number): UploadStream {
  const declared = req.headers['content-length'] === undefined ? null : Number(req.headers['content-length']);
  const stream = new ByteCap(limit) as ByteCap & { contentType: string; declaredLength: number | null };
  stream.contentType = contentType;
  stream.declaredLength = declared;
  req.on('aborted', () => stream.destroy(new ApiError('validation_failed', 'The body ended early.')));
  req.pipe(stream);
  return stream as unknown as UploadStream;
}

/**
 * Multipart: text parts become members, parts that carry bytes (`format: binary` in the
 * schema) are spooled to a temporary file under the upload cap and handed over as
 * UploadedFile. Every part is read before the handler runs, so its members can be validated.
 */
async function readMultipart(req: Request, meta: OperationMeta, limit: number): Promise<ReadBody> {
  const dir = await mkdtemp(join(tmpdir(), 'mcp-cp-upload-'));
  const cleanup = () => rm(dir, { recursive: true, force: true });
  const fields: Record<string, unknown> = {};
  const validated: Record<string, unknown> = {};
  const writes: Promise<void>[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      const parser = Busboy({ headers: req.headers as BusboyHeaders, limits: { fileSize: limit, files: 20, fields: 100, fieldSize: 65_536, parts: 120 } });
      const fail = (err: unknown) => {
        req.unpipe(parser);
        reject(err);
      };
      parser.on('field', (name, value) => {
        fields[name] = value;
        validated[name] = value;
      });
      parser.on('file', (name, stream, filename, _encoding, mimeType) => {
        if (!meta.fileParts.includes(name)) {
          stream.resume();
          fail(validationError([{ in: 'body', pointer: `/${name}`, message: 'is not a part that carries a file' }]));
          return;
        }
        const path = join(dir, String(writes.length));
        let size = 0;
        stream.on('data', (chunk: Buffer) => (size += chunk.length));
        stream.on('limit', () => fail(tooLarge(limit)));
        const file: UploadedFile = {
          filename: filename || null,
          contentType: (mimeType || 'application/octet-stream').toLowerCase(),
          get size() {
            return size;
          },
          open: () => createReadStream(path),
        };
        fields[name] = file;
        validated[name] = filename || name;
        writes.push(pipeline(stream, createWriteStream(path)).catch(fail));
      });
      for (const event of ['partsLimit', 'filesLimit', 'fieldsLimit'] as const) parser.on(event, () => fail(tooLarge(limit)));
      parser.on('error', (err) => fail(validationError([{ in: 'body', pointer: '', message: `is not valid multipart/form-data: ${(err as Error).message}` }])));
      parser.on('finish', () => Promise.all(writes).then(() => resolve(), fail));
      req.on('aborted', () => fail(new ApiError('validation_failed', 'The body ended early.')));
      req.pipe(parser);
    });
    return { body: fields, validated, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/**
 * Reads the body as the operation declares it, after the guard has let the caller in: no
 * bytes are parsed for a request that would be refused anyway. A body on an operation that
 * takes none is a 400, one of an undeclared media type a 415.
 */
/**
 * The answer for a request that sends no body, at once (no promise): what readBody would
 * resolve with, or throw. Null when there is a body to read.
 */
export function absentBody(req: Request, meta: OperationMeta): ReadBody | null {
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (hasBody) return null;
  if (meta.bodyRequired && meta.bodyMedia.every((m) => kindOf(m) === 'raw')) {
    throw validationError([{ in: 'body', pointer: '', message: `a body is required (${meta.bodyMedia.join(' or ')})` }]);
  }
  return nothing;
}

/** What a multipart body may carry besides its file parts (boundaries, part headers, text fields) before its Content-Length alone is refused. */
const MULTIPART_OVERHEAD_BYTES = 1024 * 1024;

export async function readBody(req: Request, res: Response, meta: OperationMeta, limits: BodyLimits, override: number | null = null): Promise<ReadBody> {
  const absent = absentBody(req, meta);
  if (absent) return absent;
  if (meta.bodyMedia.length === 0) {
    throw validationError([{ in: 'body', pointer: '', message: `${req.method} ${meta.path} takes no body` }]);
  }
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  const declared = meta.bodyMedia.find((m) => matches(m, type));
  if (!type || !declared) {
    throw new ApiError('unsupported_media_type', `Send the body as ${meta.bodyMedia.join(' or ')}${type ? `, not ${type}` : ''}.`);
  }
  const kind = kindOf(declared);
  const cap = override ?? meta.maxBodyBytes ?? (kind === 'json' || kind === 'form' ? limits.parsedBytes : limits.uploadBytes);
  const declaredLength = Number(req.headers['content-length'] ?? 0);
  // A multipart cap is each file's: the body around a file of exactly the cap is a little longer.
  if (declaredLength > cap + (kind === 'multipart' ? MULTIPART_OVERHEAD_BYTES : 0)) throw tooLarge(cap);
  switch (kind) {
    case 'json': {
      const body = plainUtf8(req) ? await readJson(req, cap) : await parseWith(express.json({ limit: cap, type: () => true, strict: false }), req, res);
      refuseLoneSurrogates(body);
      return { body, validated: body, cleanup: nothing.cleanup };
    }
    case 'form': {
      const body = await parseWith(express.urlencoded({ limit: cap, type: () => true, extended: false, parameterLimit: 200 }), req, res);
      return { body, validated: body, cleanup: nothing.cleanup };
    }
    case 'multipart':
      return readMultipart(req, meta, cap);
    case 'raw':
      return { body: uploadStream(req, type, cap), validated: undefined, cleanup: nothing.cleanup };
  }
}
