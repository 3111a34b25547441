import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import type { Request as BackendRequest } from 'openapi-backend';
import type { Authentication, PresentedCredential } from '../auth/credentials';
import { ApiError, errorBody } from './errors';

/** What the middleware learns about a request once, for every later step to read. */
export interface RequestState {
  requestId: string;
  log: Logger;
  credential: PresentedCredential | null;
  authentication?: Promise<Authentication>;
  backendRequest?: BackendRequest & { allowed?: string[] };
  /** A body that could not be parsed; answered only after matching and the guard. */
  bodyError?: unknown;
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

/** Express body-parser failures, recognised by the `type` the parser sets. */
export function fromParserError(err: { type?: string; status?: number; limit?: number }): ApiError | null {
  if (err.type === 'entity.parse.failed') return new ApiError('malformed_json', 'The body is not well-formed JSON.');
  if (err.type === 'entity.too.large') return new ApiError('payload_too_large', `The body is larger than the limit of ${err.limit} bytes.`);
  if (err.type === 'encoding.unsupported' || err.type === 'charset.unsupported') {
    return new ApiError('unsupported_media_type', 'Send the body as UTF-8 JSON.');
  }
  if (err.type === 'request.aborted') return new ApiError('validation_failed', 'The body ended early.');
  return null;
}

/** Renders any thrown value as the Error object; anything that is not an ApiError is a 500 and is logged. */
export function sendError(req: Request, res: Response, err: unknown): void {
  const state = requestState(req);
  let error = err instanceof ApiError ? err : fromParserError((err ?? {}) as { type?: string });
  if (!error) {
    state.log.error({ err }, 'request failed');
    error = new ApiError('internal_error', 'The server failed to answer; quote the request id when reporting it.');
  }
  if (res.headersSent) {
    res.destroy();
    return;
  }
  for (const [name, value] of Object.entries(error.options.headers ?? {})) res.setHeader(name, value);
  if (error.status === 401) {
    res.setHeader('WWW-Authenticate', error.code === 'invalid_token'
      ? 'Bearer realm="mcp-control-plane", error="invalid_token"'
      : 'Bearer realm="mcp-control-plane"');
  }
  res.status(error.status).json(errorBody(error.code, error.detail, state.requestId, error.options.errors));
}
