import type { Request, Response } from 'express';
import type { Operation } from 'openapi-backend';
import type { OperationMeta } from '../spec/operations';
import type { OpenApiDocument } from '../spec';
import { absentBody, drainRequest, leavesSomething, readBody, type BodyLimits, type ReadBody } from './body';
import { RequestContext, type AppDeps, type ClientPresence } from './context';
import { allowCrossOrigin, answerPreflight } from './cors';
import { ApiError, MAX_LISTED_PROBLEMS, notImplementedError, validationError } from './errors';
import type { CredentialCache } from '../identity/credential-cache';
import { guard, refuseMissingCredential, type Admitted, type GuardDeps } from './guard';
import type { AnyResult, ProtocolInput } from './handler-types';
import { createSpecValidator } from './openapi-backend';
import type { RateLimits } from './rate-limit';
import type { Registry } from './registry';
import { clientIp, requestState, sendError, sendResult } from './respond';
import { PathRouter, type RouteMatch } from './router';

interface Route {
  operationId: string;
  meta: OperationMeta;
  operation: Operation;
  /** Multipart file parts the schema requires: the validator drops binary members from `required`, so they are checked here. */
  requiredFiles: string[];
}

/** What a handler receives, once the router has checked it. */
interface HandlerInput {
  params: Record<string, unknown>;
  query: Record<string, unknown>;
  headers: Record<string, string | undefined>;
  body: unknown;
}

function requiredFiles(meta: OperationMeta, operation: Operation): string[] {
  const body = operation.requestBody as { content?: Record<string, { schema?: { required?: string[] } }> } | undefined;
  const required = body?.content?.['multipart/form-data']?.schema?.required ?? [];
  return meta.fileParts.filter((part) => required.includes(part));
}

/**
 * A path parameter whose percent-encoding is broken (`%E0%A4%A`) cannot name anything: 400
 * on every route, built or not, before anything tries to decode it.
 */
function refuseUndecodablePath(template: string, path: string): void {
  if (!path.includes('%')) return;
  const names = template.split('/');
  const problems = path.split('/').flatMap((segment, i) => {
    const name = /^\{(.+)\}$/.exec(names[i] ?? '')?.[1];
    if (!name) return [];
    try {
      decodeURIComponent(segment);
      return [];
    } catch {
      return [{ in: 'path' as const, pointer: `/${name}`, message: 'is not valid percent-encoding' }];
    }
  });
  if (problems.length > 0) throw validationError(problems);
}

/**
 * A request answered before its body was read to the end (refused by the guard, too large,
 * or a handler that did not need it) has its body drained first, within bounds, so that the
 * client, still writing, gets to read the answer. What is left past the bounds stays on the
 * connection: the answer then says `Connection: close`, so that neither side reads the next
 * request out of those bytes.
 */
async function settleUnread(req: Request, res: Response): Promise<void> {
  if (req.complete || res.headersSent) return;
  await drainRequest(req);
  if (!req.complete && !res.headersSent) res.setHeader('Connection', 'close');
}

export interface OperationRouter {
  handle(req: Request, res: Response): Promise<void>;
  /**
   * Answers `err` for a request refused before it reached the router (the server shutting
   * down, the address's rate limit), in the format of the area whose path it names.
   */
  refuse(req: Request, res: Response, err: unknown): void;
  /** Compiles every operation's validators now (they are otherwise compiled on first use); throws on a schema Ajv refuses. */
  compileAll(): void;
}

export interface RouterDefinition {
  spec: OpenApiDocument;
  operations: Readonly<Record<string, OperationMeta>>;
  registry: Registry;
  limits: RateLimits;
  credentials: CredentialCache;
}

/**
 * The path of a request through the spec, one named step each:
 *   match     the operation, by method and path (404, 405), or 501 when nothing serves it
 *   guard     credential, organization, person-only, permission (401, 400, 403)
 *   read      the body, as the operation's media type says (400, 413, 415)
 *   validate  parameters and body against the spec (400)
 *   dispatch  the handler, then its result: JSON, text, bytes, a stream or events
 * Errors from any step are rendered once, in the matched area's format when it has one.
 */
export async function createOperationRouter(deps: AppDeps, definition: RouterDefinition): Promise<OperationRouter> {
  const { operations, registry } = definition;
  // Errors of an operation in the format of the module that serves it (or of its tag's area).
  const renderError = (operationId: string, error: ApiError, requestId: string, path: string) =>
    registry.renderError(operationId, error, requestId, path, deps);
  const validator = await createSpecValidator(definition.spec);
  const routes = new PathRouter<Route>();
  for (const [operationId, meta] of Object.entries(operations)) {
    const operation = validator.operations.get(operationId);
    if (!operation) throw new Error(`${operationId} is missing from the dereferenced document.`);
    routes.add(meta.method, meta.path, { operationId, meta, operation, requiredFiles: requiredFiles(meta, operation) });
  }
  const bodyLimits: BodyLimits = { parsedBytes: deps.config.bodyLimitBytes, uploadBytes: deps.config.uploadLimitBytes };
  const { limits } = definition;
  const guardDeps: GuardDeps = {
    db: deps.db,
    authenticators: registry.authenticators,
    credentials: definition.credentials,
    beforeLookup: (req) => limits.mayAuthenticate(clientIp(req)),
    countFailure: (req) => limits.failedAuthentication(clientIp(req)),
    admitted: (caller) => limits.caller(caller),
    firstParty: (origin) =>
      origin === new URL(deps.config.baseUrl).origin || (deps.config.webAppUrl !== null && origin === new URL(deps.config.webAppUrl).origin),
  };

  /** The operation whose path this is, of another method when the path has none of this one: its area renders the errors. */
  function operationAt(found: RouteMatch<Route>, path: string): Route | undefined {
    return found.route ?? found.allowed.map((method) => routes.match(method, path)?.route).find((r) => r !== undefined);
  }

  function match(req: Request, withCredential: boolean): Route {
    const found = routes.match(req.method, req.path);
    if (!found) throw new ApiError('not_found', `No operation at ${req.path}.`);
    if (!found.route) {
      const allowed = found.allowed.join(', ');
      // The path is an operation's: its area renders the 405 in its own format (the MCP endpoint's JSON-RPC error).
      const sibling = operationAt(found, req.path);
      if (sibling) requestState(req).operationId = sibling.operationId;
      // Where the path's operations need a credential, a caller without one hears that first: an
      // MCP client probing its endpoint with GET learns from the 401's challenge where to sign in.
      // A preflight carries no credential by design, so it still hears the 405.
      if (sibling && !withCredential && req.method !== 'OPTIONS') refuseMissingCredential(sibling.meta, guardDeps);
      throw new ApiError('method_not_allowed', `${req.path} supports ${allowed}, not ${req.method}.`, { headers: { Allow: allowed } });
    }
    const { operationId, meta } = found.route;
    requestState(req).operationId = operationId;
    refuseUndecodablePath(meta.path, req.path);
    // A gap in the contract is answered as one, to every caller: there is nothing to protect yet.
    if (registry.notImplemented.has(operationId)) throw notImplementedError(operationId);
    if (meta.engine) throw new ApiError('not_found', `${operationId} is served by the ${meta.engine} engine, which did not answer ${req.path}.`);
    return found.route;
  }

  function validate(route: Route, req: Request, body: ReadBody): HandlerInput | ProtocolInput<HandlerInput> {
    const checked = validator.validateRequest(
      { method: req.method, path: req.path, headers: req.headers, query: req.query as Record<string, unknown>, body: body.validated },
      route.operation,
    );
    const fields = body.validated as Record<string, unknown> | undefined;
    const missingFiles = fields ? route.requiredFiles.filter((part) => !(part in fields)) : [];
    const headers: Record<string, string | undefined> = {};
    for (const name of route.meta.headers) {
      const value = req.headers[name.toLowerCase()];
      headers[name] = Array.isArray(value) ? value.join(', ') : value;
    }
    if ('problems' in checked || missingFiles.length > 0) {
      const problems = [
        ...('problems' in checked ? checked.problems : []),
        ...missingFiles.map((part) => ({ in: 'body' as const, pointer: `/${part}`, message: 'is required' })),
      ];
      // A protocol operation answers its problems in its own protocol: its handler gets them.
      if (route.meta.protocol) {
        const raw = 'problems' in checked ? checked.raw : { params: checked.params, query: checked.query };
        return {
          valid: false,
          problems: problems.slice(0, MAX_LISTED_PROBLEMS),
          raw: { params: raw.params ?? {}, query: raw.query ?? {}, headers, body: body.body },
        };
      }
      throw validationError(problems, ('problems' in checked ? checked.total : 0) + missingFiles.length);
    }
    const value = { params: checked.params, query: checked.query, headers, body: body.body };
    return route.meta.protocol ? { valid: true, value } : value;
  }

  async function dispatch(route: Route, req: Request, res: Response, admitted: Admitted, input: ReturnType<typeof validate>): Promise<AnyResult> {
    const state = requestState(req);
    // The signal is made only for a handler that asks for it (most never do).
    let gone: AbortController | null = null;
    let listeners: Set<() => void> | null = null;
    let closedEarly = false;
    res.once('close', () => {
      if (res.writableFinished) return;
      closedEarly = true;
      gone?.abort();
      if (listeners) for (const listener of listeners) listener();
    });
    const presence: ClientPresence = {
      signal: () => {
        if (!gone) {
          gone = new AbortController();
          if (closedEarly) gone.abort();
        }
        return gone.signal;
      },
      onGone: (listener) => {
        if (closedEarly) {
          listener();
          return () => undefined;
        }
        (listeners ??= new Set()).add(listener);
        return () => void listeners?.delete(listener);
      },
    };
    const ctx = new RequestContext(
      deps,
      route.operationId,
      route.meta,
      state.requestId,
      () => state.log,
      admitted.caller,
      admitted.org,
      {
        ip: clientIp(req) ?? null,
        userAgent: typeof req.headers['user-agent'] === 'string' ? req.headers['user-agent'].slice(0, 512) : null,
        accept: typeof req.headers.accept === 'string' ? req.headers.accept : null,
        media: typeof req.headers['content-type'] === 'string' ? (req.headers['content-type'].split(';')[0]?.trim().toLowerCase() ?? null) : null,
        sessionCookie: state.credential?.scheme === 'cookie' ? state.credential.secret : null,
        cookies: typeof req.headers.cookie === 'string' ? req.headers.cookie : null,
      },
      presence,
    );
    const handler = registry.handlers.get(route.operationId);
    if (!handler) throw notImplementedError(route.operationId);
    const result = await handler(input, ctx);
    if (route.meta.audit && !ctx.wrote && result.status < 300) {
      throw new Error(`${route.operationId} succeeded without ctx.write(): its change has no audit entry.`);
    }
    if (deps.config.validateResponses === 'log' && result.body !== undefined && !result.events && (result.contentType ?? 'json').includes('json')) {
      const problems = validator.validateResponse(result.body, route.operation, result.status);
      if (problems.length > 0) state.log.warn({ operationId: route.operationId, status: result.status, problems }, 'response does not match the spec');
    }
    return result;
  }

  /** A request that matches nothing never reaches the guard: with a credential, it counts against its address. */
  function matchCounting(req: Request, withCredential: boolean): Route | Promise<Route> {
    try {
      return match(req, withCredential);
    } catch (err) {
      if (withCredential && err instanceof ApiError && (err.status === 404 || err.status === 405)) {
        const counted = limits.address(clientIp(req));
        if (counted) return counted.then(() => Promise.reject(err));
      }
      throw err;
    }
  }

  /**
   * Cross-origin requests to `x-cors` paths: an OPTIONS is answered here (true), after the
   * area's checks before authentication (the MCP endpoint's Origin rule refuses a foreign
   * page's preflight as it would its request); other requests get the headers that let the
   * page read the response. Only requests that carry an Origin, or are OPTIONS, pay for the look-up.
   */
  function crossOrigin(req: Request, res: Response): boolean {
    if (req.headers.origin === undefined && req.method !== 'OPTIONS') return false;
    const found = routes.match(req.method, req.path);
    const route = found && operationAt(found, req.path);
    if (!found || !route?.meta.cors) return false;
    if (req.method !== 'OPTIONS' || found.route) {
      allowCrossOrigin(res);
      return false;
    }
    requestState(req).operationId = route.operationId;
    registry.beforeAuthentication(route.operationId, req.headers, deps);
    answerPreflight(res, found.allowed);
    return true;
  }

  return {
    compileAll: () => validator.compileAll(),
    refuse(req, res, err) {
      const found = routes.match(req.method, req.path);
      const route = found && operationAt(found, req.path);
      if (route) requestState(req).operationId = route.operationId;
      if (route?.meta.cors && req.headers.origin !== undefined) allowCrossOrigin(res);
      sendError(req, res, err, renderError);
    },
    async handle(req, res) {
      let body: ReadBody | null = null;
      const { credential } = requestState(req);
      try {
        if (crossOrigin(req, res)) return;
        // Each step answers at once when it can (a remembered credential, counters in this
        // process, no body): only what is really awaited costs the request a turn.
        const matched = matchCounting(req, credential !== null);
        const route = matched instanceof Promise ? await matched : matched;
        // What a credential was shown for is the caller's alone: no shared cache keeps it.
        if (credential) res.setHeader('Cache-Control', 'no-store');
        registry.beforeAuthentication(route.operationId, req.headers, deps);
        const guarded = guard(route.meta, req, credential, guardDeps);
        const admitted = guarded instanceof Promise ? await guarded : guarded;
        // A credential on an operation that takes none was never looked up: its address is what counts.
        if (credential && !admitted.caller) await limits.address(clientIp(req));
        body = absentBody(req, route.meta) ?? (await readBody(req, res, route.meta, bodyLimits, registry.bodyLimit(route.operationId, deps)));
        const input = validate(route, req, body);
        const result = await dispatch(route, req, res, admitted, input);
        if (!req.complete) await settleUnread(req, res);
        await sendResult(res, result);
      } catch (err) {
        if (!req.complete) await settleUnread(req, res);
        sendError(req, res, err, renderError);
      } finally {
        if (body && leavesSomething(body)) {
          const cleanup = body.cleanup;
          if (res.writableFinished || res.destroyed) void cleanup();
          else res.once('close', () => void cleanup());
        }
      }
    },
  };
}
