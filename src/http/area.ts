import type { IncomingHttpHeaders } from 'node:http';
import type { RequestHandler } from 'express';
import type { CommittedChange } from '../db/written-tables';
import type { Tag } from '../../generated/operations';
import type { Authenticator } from '../auth/credentials';
import type { OutboxConsumer } from '../events/outbox';
import type { AppDeps, RequestContext } from './context';
import type { ApiError } from './errors';
import type { AreaHandlers } from './handler-types';

/** An error in an area's own wire format (SCIM, OAuth, JSON-RPC) instead of the Error object. */
export interface RenderedError {
  status: number;
  contentType: string;
  body: unknown;
  headers?: Record<string, string>;
}

/**
 * Everything one area brings to the app, declared in its own folder
 * (`src/areas/<folder>/<folder>.area.ts`, found at start-up): the handlers of its tag's
 * operations, and whatever of the shared machinery it plugs into. Nothing outside the
 * folder lists it.
 */
export interface Area<T extends Tag = Tag> {
  tag: T;
  /** Any subset of the tag's operations; the others answer 501 `not_implemented`. */
  handlers: AreaHandlers<T, RequestContext>;
  /** Security schemes of the spec this area authenticates (a SCIM token, an MCP server token, …). */
  authenticators?: Record<string, Authenticator>;
  /**
   * Engines mounted beside the router, by the name operations give in `x-engine` (an OAuth
   * server library, say). Each is mounted at `path` before the router and serves the
   * operations that name it; they count as built.
   */
  engines?: Record<string, { path: string; create(deps: AppDeps): RequestHandler }>;
  /** Consumers of the outbox, beside notification destinations (logging destinations, …). */
  consumers?: (deps: AppDeps) => OutboxConsumer[];
  /**
   * Columns holding secrets sealed with the encryption keys, and the context each row's
   * value was sealed with: `cli secrets reseal` moves them all to the current key.
   */
  sealed?: SealedColumn[];
  /**
   * Renders the errors of this area's operations (including the guard's 401 and 403) in its
   * protocol's format; null keeps the Error object for that operation.
   */
  renderError?: (error: ApiError, operationId: string, requestId: string, path: string) => RenderedError | null;
  /**
   * Runs once when the app starts, before it serves a request (loading and checking data the
   * area ships, such as the connector catalog); a throw stops the start.
   */
  start?: (deps: AppDeps) => Promise<void>;
  /**
   * Checks of this area's operations that come before authentication (and its rate limit):
   * throws an ApiError to refuse. The MCP endpoint refuses a foreign `Origin` here, so that a
   * web page learns nothing from the endpoint, not even whether a token is needed. It runs on
   * the CORS preflight (OPTIONS) of an `x-cors` path too, as the operation of that path.
   */
  beforeAuthentication?: (operationId: string, headers: IncomingHttpHeaders, deps: AppDeps) => void;
  /** Runs when the app closes: releases what `start` opened (kept upstream sessions, timers). */
  stop?: (deps: AppDeps) => Promise<void>;
  /**
   * Runs after every write this process commits, before its response leaves: what the area
   * remembers of the database forgets, so that a change is never one request late here
   * (other processes hear of it through NOTIFY triggers). The change names the organization
   * and the tables it wrote, as far as they are known.
   */
  afterCommit?: (deps: AppDeps, change: CommittedChange) => void;
}

export interface SealedColumn {
  table: string;
  column: string;
  /**
   * The columns that identify a row, for a table keyed by more than `id` (default `['id']`);
   * `context` then gets their values joined by `:` (`org_…:acme-crm`).
   */
  key?: readonly string[];
  /** The associated data the value was sealed with, from the row's id (or key values). */
  context(id: string): string;
}

/** Declares an area; the handlers are checked against its tag's operations as they are written. */
export function defineArea<T extends Tag>(area: Area<T>): Area<T> {
  return area;
}
