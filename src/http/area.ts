import type { IncomingHttpHeaders } from 'node:http';
import type { RequestHandler } from 'express';
import type { CommittedChange } from '../db/written-tables';
import type { Tag } from '../../generated/operations';
import type { Authenticator } from '../identity/credentials';
import type { OutboxConsumer } from '../events/outbox';
import type { AppDeps, RequestContext } from './context';
import type { ApiError } from './errors';
import type { AreaHandlers, ModuleHandlers } from './handler-types';
import type { HookListeners } from './hooks';
import type { Page } from './pages';

/** An error in an area's own wire format (SCIM, OAuth, JSON-RPC) instead of the Error object. */
export interface RenderedError {
  status: number;
  contentType: string;
  body: unknown;
  headers?: Record<string, string>;
}

/**
 * Everything one module brings to the app: the handlers of the operations it serves, and
 * whatever of the shared machinery it plugs into. A REST area is a module serving (part of)
 * one tag (`defineArea`); the MCP endpoint and the protocol servers are modules serving the
 * operations of their protocol (`defineModule`). Every module is listed once, in
 * generated/modules.ts (written by `make generate` from the `*.area.ts` and `*.module.ts`
 * files): adding a folder with one adds it.
 */
export interface Module {
  /** Names the module in start-up errors (an area: its tag). */
  name: string;
  /** An area's tag: its handlers must be of that tag, and the tag's unbuilt operations answer in its error format. */
  tag?: Tag;
  /** The operations it serves, any of the spec's; each is served by one module. The rest answer 501 `not_implemented`. */
  handlers: ModuleHandlers<RequestContext>;
  /** Security schemes of the spec this module authenticates (a SCIM token, an MCP server token, …). */
  authenticators?: Record<string, Authenticator>;
  /**
   * Engines mounted beside the router, by the name operations give in `x-engine` (an OAuth
   * server library, say). Each is mounted at `path` before the router and serves the
   * operations that name it; they count as built.
   */
  engines?: Record<string, { path: string; create(deps: AppDeps): RequestHandler }>;
  /** Pages of the web app this server serves, by exact path (GET): the sign-in pages, say. */
  pages?: Record<string, Page>;
  /** Consumers of the outbox, beside notification destinations (logging destinations, …). */
  consumers?: (deps: AppDeps) => OutboxConsumer[];
  /**
   * Columns holding secrets sealed with the encryption keys, and the context each row's
   * value was sealed with: `cli secrets reseal` moves them all to the current key.
   */
  sealed?: SealedColumn[];
  /**
   * Renders the errors of this module's operations (including the guard's 401 and 403) in its
   * protocol's format; null keeps the Error object for that operation.
   */
  renderError?: (error: ApiError, operationId: string, requestId: string, path: string, deps: AppDeps) => RenderedError | null;
  /**
   * Runs once when the app starts, before it serves a request (loading and checking data the
   * area ships, such as the connector catalog); a throw stops the start.
   */
  start?: (deps: AppDeps) => Promise<void>;
  /**
   * Checks of this module's operations that come before authentication (and its rate limit):
   * throws an ApiError to refuse. The MCP endpoint refuses a foreign `Origin` here, so that a
   * web page learns nothing from the endpoint, not even whether a token is needed. It runs on
   * the CORS preflight (OPTIONS) of an `x-cors` path too, as the operation of that path.
   */
  beforeAuthentication?: (operationId: string, headers: IncomingHttpHeaders, deps: AppDeps) => void;
  /**
   * The largest body one of this module's operations takes, when a setting rather than the
   * spec decides it (the per-file limit of tool files, FILE_MAX_BYTES): refused with 413 as
   * the bytes arrive. For multipart bodies it caps each file part. null: `x-max-body-bytes`
   * or the server's limit.
   */
  bodyLimit?: (operationId: string, deps: AppDeps) => number | null;
  /** Runs when the app closes: releases what `start` opened (kept upstream sessions, timers). */
  stop?: (deps: AppDeps) => Promise<void>;
  /**
   * Runs after every write this process commits, before its response leaves: what the module
   * remembers of the database forgets, so that a change is never one request late here
   * (other processes hear of it through NOTIFY triggers). The change names the organization
   * and the tables it wrote, as far as they are known.
   */
  afterCommit?: (deps: AppDeps, change: CommittedChange) => void;
  /** The cross-area hooks it listens to (src/http/hooks.ts). */
  hooks?: HookListeners;
}

/** A REST area: a module serving any subset of one tag's operations, typed by that tag. */
export interface Area<T extends Tag = Tag> extends Omit<Module, 'name' | 'handlers' | 'tag'> {
  tag: T;
  handlers: AreaHandlers<T, RequestContext>;
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
export function defineArea<T extends Tag>(area: Area<T>): Module & { tag: T } {
  return { ...area, name: area.tag, handlers: area.handlers as ModuleHandlers<RequestContext> };
}

/** Declares a module that is not one tag's REST area (a protocol endpoint); its handlers are typed by operation id. */
export function defineModule(module: Module): Module {
  return module;
}
