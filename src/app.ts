import { createServer, IncomingMessage, ServerResponse, type Server } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { MODULES } from './modules';
import { HEALTH } from './areas/health';
import { CREDENTIAL_TABLES, CredentialCache } from './identity/credential-cache';
import { ANY_CHANGE, touches, type CommittedChange } from './db/written-tables';
import { presentedCredential } from './identity/credentials';
import type { Module } from './http/area';
import type { AppDeps, ProcessDeps } from './http/context';
import { Hooks } from './http/hooks';
import { McpRuntime } from './mcp/runtime';
import { ApiError } from './http/errors';
import { createOperationRouter } from './http/operation-router';
import { RateLimits, type CounterStore } from './http/rate-limit';
import { Redis } from 'ioredis';
import { buildRegistry, type Registry } from './http/registry';
import { logRequest } from './http/request-log';
import { clientIp, requestState, sendError, setRequestState } from './http/respond';
import { servePages } from './http/pages';
import { RESPONSE_SECURITY_HEADERS } from './http/security-headers';
import { newRequestId } from './lib/ids';
import { docsAssets } from './areas/schema';
import { loadSpec, type OpenApiDocument } from './spec';
import { describeOperations } from './spec/operations';
import { sql } from 'kysely';
import type { Db } from './db/database';
import { Metrics } from './lib/metrics';
import { failed, Tracing } from './lib/tracing';
import { context, type Context } from '@opentelemetry/api';
import type { OperationMeta } from './spec/operations';
import { outboxLagSeconds } from './events/outbox';

const INCOMING_REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

export interface AppOptions {
  /** Another document and modules than the service's own; tests of the shared machinery use small fixtures. */
  spec?: OpenApiDocument;
  modules?: readonly Module[];
}

export interface App {
  /**
   * Serves the app on a new HTTP server, tuned (tuneServer) to keep idle connections
   * `keepAliveTimeoutMs`; resolves once it listens.
   */
  listen(port: number, host: string): Promise<Server>;
  /** Readiness answers 503 from now on (shutting down); the API goes on serving until `drain`. */
  unready(): void;
  /** Answers every request from now on with 503 and `Connection: close` (shutting down); readiness too. */
  drain(): void;
  /**
   * Serves `/metrics` (Prometheus text format) and `/ready` (readiness) on a server of their
   * own, apart from the API's port (METRICS_PORT); resolves once it listens.
   */
  listenMetrics(port: number, host: string): Promise<Server>;
  /** What the modules brought: handlers, authenticators, engines, outbox consumers, and what is not built. */
  registry: Registry;
  /** What every request of this app uses: the process's collaborators, the modules' hooks, the MCP runtime. */
  deps: AppDeps;
  /** What the app remembers of credentials; forgets on every change it hears of. */
  credentials: CredentialCache;
  /**
   * Forgets everything the app remembers of the database (credentials, what areas keep), as
   * after a write of its own: for writes made beside it (tests' direct inserts).
   */
  forget(): void;
  /** Closes what the app opened itself (the Redis connection of the rate limits, the credential change listener, what areas started). */
  close(): Promise<void>;
}

export async function createApp(deps: ProcessDeps, options: AppOptions = {}): Promise<App> {
  const spec = options.spec ?? loadSpec();
  const { operations, problems } = describeOperations(spec);
  if (problems.length > 0) throw new Error(`The spec breaks ${problems.length} rule(s):\n  ${problems.join('\n  ')}`);
  const modules = options.modules ?? MODULES;
  const registry = buildRegistry(modules, operations, Object.keys(spec.components?.securitySchemes ?? {}));
  const metrics = new Metrics({
    outboxLagSeconds: () => within(outboxLagSeconds(deps.db), READY_DEADLINE_MS),
    pool: deps.pool,
    processMetrics: deps.config.metrics.port !== null,
  });
  const tracing = new Tracing(deps.config.tracing, APP_VERSION, deps.logger);
  const counters = counterStore(deps);
  const limits = new RateLimits({ ...deps.config.rateLimit, store: counters.store, onRefused: (budget) => metrics.refused(budget) });
  // Remembered only while this process hears every change (see CredentialCache); its own
  // writes clear it before their response leaves, so a revocation is never one request late here.
  const credentials = new CredentialCache({ maxAgeMs: deps.config.credentialCacheSeconds * 1000, metrics });
  const stopFollowing = deps.listen && deps.config.credentialCacheSeconds > 0 ? await credentials.follow(deps.listen, deps.logger) : async () => undefined;
  const afterCommit = deps.afterCommit;
  const forget = (change: CommittedChange = ANY_CHANGE) => {
    if (touches(change, CREDENTIAL_TABLES)) credentials.clear();
    registry.afterCommit(appDeps, change);
  };
  const appDeps: AppDeps = {
    ...deps,
    afterCommit: (change = ANY_CHANGE) => {
      forget(change);
      afterCommit?.(change);
    },
    hooks: new Hooks(modules),
    metrics,
    tracing,
    mcp: new McpRuntime(deps, metrics),
  };
  await registry.start(appDeps);
  const router = await createOperationRouter(appDeps, { spec, operations, registry, limits, credentials });
  // Express lends its request and response helpers (req.ip, req.query, res.status…) through
  // the prototypes of the server's own classes, set once; its router is not on the path of a
  // request: the operation router matches every operation, and Express's per-request
  // prototype swap and layer walk cost a tenth of a small request.
  const app = express();
  app.set('trust proxy', deps.config.trustProxy);
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  class AppRequest extends IncomingMessage {}
  Object.setPrototypeOf(AppRequest.prototype, app.request);
  class AppResponse extends ServerResponse<AppRequest> {}
  Object.setPrototypeOf(AppResponse.prototype, app.response);

  const healthBody = JSON.stringify(HEALTH);
  let draining = false;
  let unready = false;

  const assets = docsAssets();
  const lastResort = (req: Request, res: Response) => (err?: unknown) => {
    if (err) sendError(req, res, err);
    else sendError(req, res, new ApiError('not_found', `No operation at ${req.path}.`));
  };
  // Engines that own their wire format (an OAuth server library, say) answer their paths
  // before the router, in Express; their operations are still in the spec, marked x-engine.
  if (registry.engines.length > 0) {
    for (const engine of registry.engines) app.use(engine.path, engine.create(appDeps));
    app.use((req, res) => router.handle(req, res));
    app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => sendError(req, res, err));
  }
  const dispatch =
    registry.engines.length > 0
      ? (req: Request, res: Response) => app(req, res, lastResort(req, res))
      : (req: Request, res: Response) => void router.handle(req, res);
  const pages = servePages(registry.pages, appDeps, (req) => {
    const credential = requestState(req as Request).credential;
    return credential?.scheme === 'cookie' ? credential.secret : null;
  });
  // Bodies are read by the router, per operation, once the caller is known.
  const route = (req: Request, res: Response) => assets(req, res, () => pages(req, res, () => dispatch(req, res)));

  // What every request goes through, once.
  const handle = (req: Request, res: Response) => {
    req.res = res;
    res.req = req;
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && INCOMING_REQUEST_ID.test(incoming) ? incoming : newRequestId();
    res.setHeader('X-Request-Id', requestId);
    for (const [name, value] of RESPONSE_SECURITY_HEADERS) res.setHeader(name, value);
    let log: Logger | undefined;
    const credential = presentedCredential(req.headers);
    setRequestState(req, {
      requestId,
      get log() {
        log ??= deps.logger.child({ req_id: requestId });
        return log;
      },
      credential,
    });
    if (draining) {
      res.setHeader('Connection', 'close');
      router.refuse(req, res, new ApiError('service_unavailable', 'The server is shutting down; retry shortly.', { headers: { 'Retry-After': '5' } }));
      return;
    }
    // Liveness probes arrive every few seconds from every balancer: answered here, without a
    // log line, the rate limit or the router. The body is the getHealth handler's.
    if (req.url === '/health' && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(healthBody) });
      res.end(req.method === 'HEAD' ? undefined : healthBody);
      return;
    }
    const traced = tracing.enabled ? traceRequest(tracing, req, res, operations, deps.config.baseUrl) : null;
    logRequest(deps.logger, req, res, requestId, metrics);
    if (traced) return context.with(traced, admitted, undefined, req, res, credential);
    admitted(req, res, credential);
  };
  // Without a credential the address is what the rate limit counts (with one, the router counts the caller).
  const admitted = (req: Request, res: Response, credential: unknown) => {
    if (credential) return route(req, res);
    let counted: void | Promise<void>;
    try {
      counted = limits.address(clientIp(req));
    } catch (err) {
      return router.refuse(req, res, err);
    }
    if (!counted) return route(req, res);
    counted.then(
      () => route(req, res),
      (err: unknown) => router.refuse(req, res, err),
    );
  };
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    try {
      handle(req as Request, res as Response);
    } catch (err) {
      try {
        sendError(req as Request, res as Response, err);
      } catch {
        deps.logger.error({ err }, 'request failed before it could be answered');
        res.destroy();
      }
    }
  };
  return {
    listen: (port, host) =>
      new Promise((resolve, reject) => {
        const server = createServer({ IncomingMessage: AppRequest, ServerResponse: AppResponse }, listener);
        tuneServer(server, deps.config.keepAliveTimeoutMs);
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server);
        });
      }),
    unready: () => {
      unready = true;
    },
    drain: () => {
      unready = true;
      draining = true;
    },
    listenMetrics: (port, host) =>
      new Promise((resolve, reject) => {
        const server = createServer(metricsListener(metrics, { db: deps.db, logger: deps.logger, draining: () => unready }));
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server);
        });
      }),
    registry,
    deps: appDeps,
    credentials,
    forget,
    close: async () => {
      await stopFollowing();
      await counters.close();
      await registry.stop(appDeps);
      // Last: the spans of what stopping did are sent too.
      await tracing.shutdown().catch((err: unknown) => deps.logger.warn({ err }, 'traces: the last spans could not be sent'));
    },
  };
}

const APP_VERSION = '0.1.0';

/**
 * The request's SERVER span, named and labelled once the router has matched its operation
 * (`GET /team/{teamId}`, the spec's path template), ended when the response is. The context
 * it returns is the one the request runs in, so spans of the work it does are its children.
 */
function traceRequest(tracing: Tracing, req: Request, res: Response, operations: Record<string, OperationMeta>, baseUrl: string): Context | null {
  const method = req.method;
  const server = new URL(baseUrl);
  const started = tracing.serverSpan(req.headers, method, {
    'http.request.method': method,
    'url.scheme': server.protocol.slice(0, -1),
    'server.address': server.hostname,
    ...(server.port ? { 'server.port': Number(server.port) } : {}),
    'network.protocol.version': req.httpVersion,
  });
  if (!started) return null;
  const { span } = started;
  res.once('close', () => {
    const operationId = requestState(req).operationId;
    const meta = operationId ? operations[operationId] : undefined;
    if (meta) {
      span.updateName(`${method} ${meta.path}`);
      span.setAttribute('http.route', meta.path);
      span.setAttribute('cp.operation_id', operationId as string);
      // The path as asked, without its query (sign-in and OAuth links carry secrets there).
      span.setAttribute('url.path', req.path);
    }
    span.setAttribute('http.response.status_code', res.statusCode);
    if (!res.writableFinished) failed(span, 'aborted');
    else if (res.statusCode >= 500 && res.statusCode !== 501) failed(span, String(res.statusCode));
    span.end();
  });
  return started.context;
}

/** How long readiness waits for the database's answer to a trivial query before it says not ready. */
const READY_DEADLINE_MS = 2_000;

/**
 * The metrics port's requests: `/metrics` for Prometheus, `/ready` for a load balancer or an
 * orchestrator deciding whether to send traffic here (the database answers and the server is
 * not shutting down). `/health`, on the API port, stays liveness only: a replica whose
 * database is away is alive, and restarting it would not bring the database back.
 */
function metricsListener(metrics: Metrics, ready: { db: Db; logger: Logger; draining: () => boolean }) {
  const answer = (res: ServerResponse, status: number, contentType: string, body: string) => {
    res.writeHead(status, { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(body), 'Cache-Control': 'no-store' });
    res.end(body);
  };
  const json = (res: ServerResponse, status: number, body: unknown) => answer(res, status, 'application/json; charset=utf-8', JSON.stringify(body));
  return (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') return json(res, 405, { status: 'method_not_allowed' });
    if (path === '/metrics') {
      void metrics.scrape().then(
        ({ body, contentType }) => answer(res, 200, contentType, body),
        (err: unknown) => {
          ready.logger.error({ err }, 'metrics scrape failed');
          answer(res, 500, 'text/plain; charset=utf-8', 'metrics could not be collected\n');
        },
      );
      return;
    }
    if (path === '/ready') {
      if (ready.draining()) return json(res, 503, { status: 'draining' });
      void within(sql`select 1`.execute(ready.db), READY_DEADLINE_MS).then((answered) =>
        answered ? json(res, 200, { status: 'ready' }) : json(res, 503, { status: 'database_unavailable' }),
      );
      return;
    }
    json(res, 404, { status: 'not_found' });
  };
}

/** What `work` resolves to, or null when it fails or takes longer than `deadlineMs` (never rejects). */
function within<T>(work: Promise<T>, deadlineMs: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), deadlineMs);
  });
  const settled = work.then(
    (value) => value,
    () => null,
  );
  return Promise.race([settled, late]).finally(() => clearTimeout(timer));
}

/** The longest a request waits for Redis to count it before the in-process stand-in does. */
const REDIS_COMMAND_TIMEOUT_MS = 500;

/** The rate limits' counters: in this process, or shared by the replicas in PostgreSQL or Redis. */
function counterStore(deps: ProcessDeps): { store: CounterStore; close(): Promise<void> } {
  const { store } = deps.config.rateLimit;
  if (store === 'postgres' && deps.pool) return { store: { kind: 'postgres', pool: deps.pool }, close: async () => undefined };
  if (store === 'redis' && deps.config.redisUrl) {
    // No offline queue: while Redis is away, commands fail at once and the limiter's in-memory
    // stand-in answers. The command timeout bounds a Redis that accepts but does not answer
    // (frozen, or a partition): a request never waits on its counters longer than that.
    const client = new Redis(deps.config.redisUrl, {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
      connectTimeout: REDIS_COMMAND_TIMEOUT_MS * 4,
    });
    // ioredis reports every failed reconnection (several a second): the log says it once when
    // Redis is lost and once when it is back.
    let lost = false;
    let lastSlow = 0;
    client.on('error', (err) => {
      if (err.message === 'Command timed out') {
        // Slow rather than gone (or this process too busy to read its answer in time): at most a line a minute while it lasts.
        if (Date.now() - lastSlow < 60_000) return;
        lastSlow = Date.now();
        deps.logger.warn({ err: { message: err.message } }, 'rate-limit store (Redis) slow: counting in this process when it does not answer in time');
        return;
      }
      if (lost) return;
      lost = true;
      deps.logger.warn({ err: { message: err.message } }, 'rate-limit store (Redis) unavailable: counting in this process until it is back');
    });
    client.on('ready', () => {
      if (!lost) return;
      lost = false;
      deps.logger.info('rate-limit store (Redis) is back: counters are shared again');
    });
    return {
      store: { kind: 'redis', client },
      close: async () => {
        await client.quit().catch(() => undefined);
        // quit() fails while Redis is away, and the client would go on reconnecting for ever.
        client.disconnect();
      },
    };
  }
  return { store: { kind: 'memory' }, close: async () => undefined };
}

/**
 * The HTTP server's connection timing. Node closes idle connections after 5 s by default; a
 * client or load balancer that keeps them longer then sends a request on a closing socket
 * and sees a reset. The server should be the last to close an idle connection.
 */
export function tuneServer(server: Server, keepAliveTimeoutMs: number): void {
  server.keepAliveTimeout = keepAliveTimeoutMs;
  server.headersTimeout = keepAliveTimeoutMs + 1_000;
}
