import type { IncomingHttpHeaders } from 'node:http';
import type { CommittedChange } from '../db/written-tables';
import type { RequestHandler } from 'express';
import { apiTokenAuthenticator, sessionAuthenticator, type Authenticator } from '../identity/credentials';
import type { OutboxConsumer } from '../events/outbox';
import type { OperationMeta } from '../spec/operations';
import type { Module, RenderedError, SealedColumn } from './area';
import type { Page } from './pages';
import type { AppDeps, RequestContext } from './context';
import type { ApiError } from './errors';
import type { AnyResult, ProtocolInput } from './handler-types';

type AnyInput = { params: unknown; query: unknown; headers: unknown; body: unknown };
/** Any handler, as the router calls it: a protocol operation's (`x-protocol`) takes a ProtocolInput. */
export type AnyHandler = (input: AnyInput | ProtocolInput<AnyInput>, ctx: RequestContext) => Promise<AnyResult>;

/** The modules merged into what the router needs, checked against the spec's operations. */
export interface Registry {
  handlers: ReadonlyMap<string, AnyHandler>;
  /** Security scheme → how it authenticates. Schemes nobody registered accept nothing. */
  authenticators: ReadonlyMap<string, Authenticator>;
  engines: ReadonlyArray<{ name: string; path: string; create(deps: AppDeps): RequestHandler }>;
  /** The web app's pages the modules serve, by path. */
  pages: ReadonlyMap<string, Page>;
  /** Operations the contract has but nothing serves: they answer 501 `not_implemented`. */
  notImplemented: ReadonlySet<string>;
  renderError(operationId: string, error: ApiError, requestId: string, path: string, deps: AppDeps): RenderedError | null;
  /** The serving module's checks before authentication (Module.beforeAuthentication); throws to refuse. */
  beforeAuthentication(operationId: string, headers: IncomingHttpHeaders, deps: AppDeps): void;
  /** The serving module's cap on the operation's body when a setting decides it (Module.bodyLimit); null: the spec's or the server's. */
  bodyLimit(operationId: string, deps: AppDeps): number | null;
  /** Every module's outbox consumers, for the outbox worker. */
  consumers(deps: AppDeps): OutboxConsumer[];
  /** Every column of sealed secrets, for re-sealing after a key rotation. */
  sealed: readonly SealedColumn[];
  /** Runs every module's start-up step, in module order; a throw stops the start. */
  start(deps: AppDeps): Promise<void>;
  /** Runs every module's stop step (app shutdown); a failing one does not keep the others from running. */
  stop(deps: AppDeps): Promise<void>;
  /** Tells every module that a write of this process committed (Module.afterCommit). */
  afterCommit(deps: AppDeps, change: CommittedChange): void;
}

/** The schemes the shared machinery authenticates itself; modules add the protocol ones. */
const CORE_AUTHENTICATORS: Record<string, Authenticator> = { apiToken: apiTokenAuthenticator, session: sessionAuthenticator };

export function buildRegistry(modules: readonly Module[], operations: Readonly<Record<string, OperationMeta>>, schemes: readonly string[]): Registry {
  const problems: string[] = [];
  const handlers = new Map<string, AnyHandler>();
  const servedBy = new Map<string, Module>();
  const authenticators = new Map<string, Authenticator>(Object.entries(CORE_AUTHENTICATORS));
  const engines: Registry['engines'][number][] = [];
  const pages = new Map<string, Page>();
  const names = new Set<string>();

  for (const module of modules) {
    if (names.has(module.name)) problems.push(`two modules are named "${module.name}"`);
    names.add(module.name);
    const tag = module.tag;
    for (const [operationId, handler] of Object.entries(module.handlers)) {
      const meta = operations[operationId];
      if (!meta) problems.push(`${module.name}: ${operationId} is not an operation of the spec`);
      else if (tag !== undefined && meta.tag !== tag) problems.push(`${module.name}: ${operationId} belongs to the tag "${meta.tag}"`);
      else if (meta.engine) problems.push(`${module.name}: ${operationId} is served by the engine "${meta.engine}", not a handler`);
      else if (servedBy.has(operationId)) problems.push(`${module.name}: ${operationId} is served by ${servedBy.get(operationId)?.name} already`);
      else if (typeof handler === 'function') {
        handlers.set(operationId, handler as unknown as AnyHandler);
        servedBy.set(operationId, module);
      }
    }
    for (const [scheme, authenticator] of Object.entries(module.authenticators ?? {})) {
      if (!schemes.includes(scheme)) problems.push(`${module.name}: authenticates "${scheme}", which is not a security scheme of the spec`);
      if (authenticators.has(scheme)) problems.push(`${module.name}: "${scheme}" is authenticated elsewhere already`);
      authenticators.set(scheme, authenticator);
    }
    for (const [path, page] of Object.entries(module.pages ?? {})) {
      if (pages.has(path)) problems.push(`${module.name}: the page ${path} is served twice`);
      if (Object.values(operations).some((op) => op.path === path)) problems.push(`${module.name}: the page ${path} is an operation's path`);
      pages.set(path, page);
    }
    for (const [name, engine] of Object.entries(module.engines ?? {})) {
      if (engines.some((e) => e.name === name)) problems.push(`${module.name}: the engine "${name}" is mounted twice`);
      engines.push({ name, ...engine });
    }
  }
  if (problems.length > 0) throw new Error(`The modules do not fit the spec:\n  ${problems.join('\n  ')}`);
  // An operation nobody serves yet (501) still answers in the format of the area of its tag.
  const ownerOf = (operationId: string): Module | undefined => {
    const served = servedBy.get(operationId);
    if (served) return served;
    const tag = operations[operationId]?.tag;
    return tag === undefined ? undefined : modules.find((m) => m.tag === tag);
  };

  const mounted = new Set(engines.map((e) => e.name));
  const notImplemented = new Set(
    Object.entries(operations)
      .filter(([id, meta]) => (meta.engine ? !mounted.has(meta.engine) : !handlers.has(id)))
      .map(([id]) => id),
  );
  return {
    handlers,
    authenticators,
    engines,
    pages,
    notImplemented,
    renderError(operationId, error, requestId, path, deps) {
      return ownerOf(operationId)?.renderError?.(error, operationId, requestId, path, deps) ?? null;
    },
    beforeAuthentication(operationId, headers, deps) {
      servedBy.get(operationId)?.beforeAuthentication?.(operationId, headers, deps);
    },
    bodyLimit(operationId, deps) {
      return servedBy.get(operationId)?.bodyLimit?.(operationId, deps) ?? null;
    },
    consumers: (deps) => modules.flatMap((module) => module.consumers?.(deps) ?? []),
    sealed: modules.flatMap((module) => module.sealed ?? []),
    async start(deps) {
      for (const module of modules) await module.start?.(deps);
    },
    async stop(deps) {
      await Promise.allSettled(modules.map((module) => module.stop?.(deps)));
    },
    afterCommit(deps, change) {
      for (const module of modules) module.afterCommit?.(deps, change);
    },
  };
}
