import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import type { PresentedCredential } from '../identity/credentials';
import { isDatabaseUnavailable, isStatementCancelled } from '../db/unavailable';
import { DependencyUnavailableError } from '../lib/unavailable';
import { isUnstorableText } from '../db/unstorable';
import type { RenderedError } from './area';
import { fromParserError } from './body';
import { ApiError, errorBody } from './errors';
import type { AnyResult, ServerSentEvent } from './handler-types';
import { ProtocolRefusal } from './protocol';
import { sendRepresentation } from './representation';

/** What the middleware learns about a request once, for every later step to read. */
export interface RequestState {
  requestId: string;
  log: Logger;
  credential: PresentedCredential | null;
  /** The operation matched, once the router knows it: errors are rendered in its area's format. */
  operationId?: string;
  /** req.ip, once read (Express works it out again, trusted proxies and all, on every read). */
  ip?: string | null;
}

const STATE = Symbol('requestState');

export function setRequestState(req: Request, state: RequestState): void {
  (req as unknown as Record<symbol, RequestState>)[STATE] = state;
}

export function requestState(req: Request): RequestState {
  const state = (req as unknown as Record<symbol, RequestState | undefined>)[STATE];
  if (!state) throw new Error('Request state is missing: the request-id middleware must run first.');
  return state;
}

/** The client's address (req.ip: the trusted proxies' hops taken off), worked out once per request. */
export function clientIp(req: Request): string | undefined {
  const state = (req as unknown as Record<symbol, RequestState | undefined>)[STATE];
  if (!state) return req.ip;
  if (state.ip === undefined) state.ip = req.ip ?? null;
  return state.ip ?? undefined;
}

/** Renders an error in an area's own format when the matched operation's area has one. */
export type ErrorRenderer = (operationId: string, error: ApiError, requestId: string, path: string) => RenderedError | null;

/** Renders any thrown value as the Error object (or the area's format); anything that is not an ApiError is a 500 and is logged. */
export function sendError(req: Request, res: Response, err: unknown, render?: ErrorRenderer): void {
  const state = requestState(req);
  let error = err instanceof ApiError ? err : fromParserError((err ?? {}) as { type?: string });
  if (!error && isUnstorableText(err)) {
    error = new ApiError(
      'validation_failed',
      'A text value in the request contains the NUL character (U+0000), which cannot be stored; remove it and send the request again.',
    );
  }
  if (!error && err instanceof DependencyUnavailableError) {
    state.log.error({ err: { message: err.message, cause: describeCause(err.cause) } }, 'request failed: a service it needs cannot be reached');
    error = new ApiError('service_unavailable', `${err.dependency} cannot be reached right now; retry shortly.`, {
      headers: { 'Retry-After': String(err.retryAfterSeconds) },
    });
  }
  if (!error && isStatementCancelled(err)) {
    state.log.error({ err }, 'request failed: a database statement ran past its timeout or was cancelled');
    error = new ApiError('service_unavailable', 'The database did not answer in time; retry shortly.', { headers: { 'Retry-After': '5' } });
  }
  if (!error && isDatabaseUnavailable(err)) {
    state.log.error({ err }, 'request failed: the database cannot be reached');
    error = new ApiError('service_unavailable', 'The database cannot be reached right now; retry shortly.', { headers: { 'Retry-After': '5' } });
  }
  if (!error) {
    state.log.error({ err }, 'request failed');
    error = new ApiError('internal_error', 'The server failed to answer; quote the request id when reporting it.');
  }
  if (res.headersSent) {
    res.destroy();
    return;
  }
  // A stream that failed before its first byte leaves its length behind; the error has its own.
  res.removeHeader('Content-Length');
  const rendered =
    (state.operationId && render ? render(state.operationId, error, state.requestId, req.path) : null) ??
    (error instanceof ProtocolRefusal ? error.rendered : null);
  for (const [name, value] of Object.entries({ ...error.options.headers, ...rendered?.headers })) res.setHeader(name, value);
  if (error.status === 401 && !res.hasHeader('WWW-Authenticate')) {
    res.setHeader(
      'WWW-Authenticate',
      error.code === 'invalid_token' ? 'Bearer realm="mcp-control-plane", error="invalid_token"' : 'Bearer realm="mcp-control-plane"',
    );
  }
  if (rendered) {
    res
      .status(rendered.status)
      .type(rendered.contentType)
      .send(typeof rendered.body === 'string' ? rendered.body : JSON.stringify(rendered.body));
    return;
  }
  res.status(error.status).json(errorBody(error.code, error.detail, state.requestId, error.options.errors));
}

function serverSentEvent(event: ServerSentEvent): string {
  const data = typeof event.data === 'string' ? event.data : JSON.stringify(event.data);
  let text = '';
  if (event.event) text += `event: ${event.event}\n`;
  if (event.id) text += `id: ${event.id}\n`;
  for (const line of data.split('\n')) text += `data: ${line}\n`;
  return `${text}\n`;
}

/**
 * Streams server-sent events as the handler produces them. When the client goes away the
 * iterator is closed (its `finally` runs) and nothing more is written.
 */
async function sendEvents(res: Response, events: AsyncIterable<ServerSentEvent>): Promise<void> {
  res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
  res.setHeader('Cache-Control', 'no-cache, no-transform');
  // Proxies (nginx) buffer responses by default; an event stream must pass as it is written.
  res.setHeader('X-Accel-Buffering', 'no');
  res.flushHeaders();
  const iterator = events[Symbol.asyncIterator]();
  let finished = false;
  res.once('close', () => {
    if (!finished) void iterator.return?.()?.catch(() => undefined);
  });
  try {
    for (;;) {
      const next = await iterator.next();
      if (next.done || res.destroyed) break;
      if (!res.write(serverSentEvent(next.value))) await new Promise((resolve) => res.once('drain', resolve));
    }
  } finally {
    finished = true;
  }
  res.end();
}

/** Sends a handler's result: JSON, text or bytes, a stream, or server-sent events. */
export async function sendResult(res: Response, result: AnyResult): Promise<void> {
  if (result.representation) return sendRepresentation(res.req, res, result.representation, result.headers);
  res.status(result.status);
  for (const [name, value] of Object.entries(result.headers ?? {})) res.setHeader(name, value as string | number | readonly string[]);
  if (result.events) return sendEvents(res, result.events);
  const body = result.body;
  if (body === undefined) {
    res.end();
    return;
  }
  if (body instanceof Readable) {
    res.setHeader('Content-Type', result.contentType ?? 'application/octet-stream');
    if (result.contentLength !== undefined) res.setHeader('Content-Length', result.contentLength);
    await pipeline(body, res);
    return;
  }
  if (result.contentType && !result.contentType.includes('json')) {
    res.type(result.contentType).send(typeof body === 'string' ? body : Buffer.from(body as Uint8Array));
    return;
  }
  // What res.json would send, without its per-response work this server never needs (ETag,
  // freshness, charset negotiation): a sixth of a small read's time in profiles.
  // Encoded once: its length and the bytes sent come from the same pass.
  const bytes = Buffer.from(JSON.stringify(body));
  res.setHeader('Content-Type', result.contentType ? withCharset(result.contentType) : 'application/json; charset=utf-8');
  res.setHeader('Content-Length', bytes.length);
  res.end(res.req.method === 'HEAD' ? undefined : bytes);
}

function withCharset(contentType: string): string {
  return /;\s*charset=/i.test(contentType) ? contentType : `${contentType}; charset=utf-8`;
}

/** A dependency's failure as an operator reads it: its name, code and message (an SDK's error object holds request details, never logged whole). */
function describeCause(cause: unknown): Record<string, unknown> {
  if (!cause || typeof cause !== 'object') return { message: String(cause) };
  const { name, code, message } = cause as { name?: unknown; code?: unknown; message?: unknown };
  return { name, code, message };
}
