import type { IncomingHttpHeaders } from 'node:http';
import type { CommittedChange } from '../db/written-tables';
import type { RequestHandler } from 'express';
import { apiTokenAuthenticator, sessionAuthenticator, type Authenticator } from '../auth/credentials';
import type { OutboxConsumer } from '../events/outbox';
import type { OperationMeta } from '../spec/operations';
import type { Area, RenderedError, SealedColumn } from './area';
import type { AppDeps, RequestContext } from './context';
import type { ApiError } from './errors';
import type { AnyResult, ProtocolInput } from './handler-types';

type AnyInput = { params: unknown; query: unknown; headers: unknown; body: unknown };
/** Any handler, as the router calls it: a protocol operation's (`x-protocol`) takes a ProtocolInput. */
export type AnyHandler = (input: AnyInput | ProtocolInput<AnyInput>, ctx: RequestContext) => Promise<AnyResult>;

/** The areas merged into what the router needs, checked against the spec's operations. */
export interface Registry {
  handlers: ReadonlyMap<string, AnyHandler>;
  /** Security scheme → how it authenticates. Schemes nobody registered accept nothing. */
  authenticators: ReadonlyMap<string, Authenticator>;
  engines: ReadonlyArray<{ name: string; path: string; create(deps: AppDeps): RequestHandler }>;
  /** Operations the contract has but nothing serves: they answer 501 `not_implemented`. */
  notImplemented: ReadonlySet<string>;
  renderError(operationId: string, error: ApiError, requestId: string, path: string): RenderedError | null;
  /** The area's checks before authentication (Area.beforeAuthentication); throws to refuse. */
  beforeAuthentication(operationId: string, headers: IncomingHttpHeaders, deps: AppDeps): void;
  /** Every area's outbox consumers, for the outbox worker. */
  consumers(deps: AppDeps): OutboxConsumer[];
  /** Every column of sealed secrets, for re-sealing after a key rotation. */
  sealed: readonly SealedColumn[];
  /** Runs every area's start-up step, in area order; a throw stops the start. */
  start(deps: AppDeps): Promise<void>;
  /** Runs every area's stop step (app shutdown); a failing one does not keep the others from running. */
  stop(deps: AppDeps): Promise<void>;
  /** Tells every area that a write of this process committed (Area.afterCommit). */
  afterCommit(deps: AppDeps, change: CommittedChange): void;
}

/** The schemes the shared machinery authenticates itself; areas add the protocol ones. */
const CORE_AUTHENTICATORS: Record<string, Authenticator> = { apiToken: apiTokenAuthenticator, session: sessionAuthenticator };

export function buildRegistry(areas: readonly Area[], operations: Readonly<Record<string, OperationMeta>>, schemes: readonly string[]): Registry {
  const problems: string[] = [];
  const handlers = new Map<string, AnyHandler>();
  const authenticators = new Map<string, Authenticator>(Object.entries(CORE_AUTHENTICATORS));
  const engines: Registry['engines'][number][] = [];
  const renderers = new Map<string, NonNullable<Area['renderError']>>();
  const prechecks = new Map<string, NonNullable<Area['beforeAuthentication']>>();
  const tags = new Set<string>();

  for (const area of areas) {
    if (tags.has(area.tag)) problems.push(`two areas serve the tag "${area.tag}"`);
    tags.add(area.tag);
    for (const [operationId, handler] of Object.entries(area.handlers)) {
      const meta = operations[operationId];
      if (!meta) problems.push(`${area.tag}: ${operationId} is not an operation of the spec`);
      else if (meta.tag !== area.tag) problems.push(`${area.tag}: ${operationId} belongs to the tag "${meta.tag}"`);
      else if (meta.engine) problems.push(`${area.tag}: ${operationId} is served by the engine "${meta.engine}", not a handler`);
      else if (typeof handler === 'function') handlers.set(operationId, handler as unknown as AnyHandler);
    }
    for (const [scheme, authenticator] of Object.entries(area.authenticators ?? {})) {
      if (!schemes.includes(scheme)) problems.push(`${area.tag}: authenticates "${scheme}", which is not a security scheme of the spec`);
      if (authenticators.has(scheme)) problems.push(`${area.tag}: "${scheme}" is authenticated elsewhere already`);
      authenticators.set(scheme, authenticator);
    }
    for (const [name, engine] of Object.entries(area.engines ?? {})) {
      if (engines.some((e) => e.name === name)) problems.push(`${area.tag}: the engine "${name}" is mounted twice`);
      engines.push({ name, ...engine });
    }
    if (area.renderError) renderers.set(area.tag, area.renderError);
    if (area.beforeAuthentication) prechecks.set(area.tag, area.beforeAuthentication);
  }
  if (problems.length > 0) throw new Error(`The areas do not fit the spec:\n  ${problems.join('\n  ')}`);

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
    notImplemented,
    renderError(operationId, error, requestId, path) {
      const meta = operations[operationId];
      const render = meta && renderers.get(meta.tag);
      return render ? render(error, operationId, requestId, path) : null;
    },
    beforeAuthentication(operationId, headers, deps) {
      const meta = operations[operationId];
      const check = meta && prechecks.get(meta.tag);
      check?.(operationId, headers, deps);
    },
    consumers: (deps) => areas.flatMap((area) => area.consumers?.(deps) ?? []),
    sealed: areas.flatMap((area) => area.sealed ?? []),
    async start(deps) {
      for (const area of areas) await area.start?.(deps);
    },
    async stop(deps) {
      await Promise.allSettled(areas.map((area) => area.stop?.(deps)));
    },
    afterCommit(deps, change) {
      for (const area of areas) area.afterCommit?.(deps, change);
    },
  };
}
