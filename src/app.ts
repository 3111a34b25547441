import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { handlers, notImplemented } from './areas';
import { presentedCredential } from './auth/credentials';
import type { AppDeps } from './http/context';
import { createOperationRouter, type Handlers } from './http/api';
import type { OperationId, OperationMeta } from '../generated/operations';
import { ApiError } from './http/errors';
import { rateLimit } from './http/rate-limit';
import { requestState, sendError, setRequestState } from './http/respond';
import type { Logger } from 'pino';
import { newRequestId } from './lib/ids';
import { healthHandlers } from './areas/health/health.handlers';
import { docsAssets } from './areas/schema/docs';
import { logRequest } from './http/request-log';
import { loadSpec, type OpenApiDocument } from './spec';

const INCOMING_REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

export interface AppOptions {
  /** Another document and handlers than the service's own; tests of the shared machinery use small fixtures. */
  spec?: OpenApiDocument;
  handlers?: Handlers;
  notImplemented?: ReadonlySet<OperationId>;
  operations?: Readonly<Record<string, OperationMeta>>;
}

export async function createApp(deps: AppDeps, options: AppOptions = {}): Promise<Express> {
  const router = await createOperationRouter(deps, {
    spec: options.spec ?? loadSpec(),
    handlers: options.handlers ?? handlers,
    notImplemented: options.notImplemented ?? notImplemented,
    operations: options.operations,
  });
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');

  const securityHeaders = helmetHeaders();
  const health = await healthHandlers.getHealth();
  const healthBody = JSON.stringify(health.body);

  app.use((req, res, next) => {
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && INCOMING_REQUEST_ID.test(incoming) ? incoming : newRequestId();
    res.setHeader('X-Request-Id', requestId);
    for (const [name, value] of securityHeaders) res.setHeader(name, value);
    let log: Logger | undefined;
    setRequestState(req, {
      requestId,
      get log() {
        log ??= deps.logger.child({ req_id: requestId });
        return log;
      },
      credential: presentedCredential(req.headers),
    });
    if (app.locals.draining) {
      res.setHeader('Connection', 'close');
      sendError(req, res, new ApiError('service_unavailable', 'The server is shutting down; retry shortly.', { headers: { 'Retry-After': '5' } }));
      return;
    }
    // Liveness probes arrive every few seconds from every balancer: answered here, without a
    // log line, the rate limit or the router. The body is the getHealth handler's.
    if (req.url === '/health' && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(health.status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(healthBody) });
      res.end(req.method === 'HEAD' ? undefined : healthBody);
      return;
    }
    logRequest(deps.logger, req, res, requestId);
    next();
  });
  app.use(
    rateLimit({
      points: deps.config.rateLimit.points,
      durationSeconds: deps.config.rateLimit.durationSeconds,
      pool: deps.config.rateLimit.store === 'postgres' ? deps.pool : null,
    }),
  );
  const parseJson = express.json({ limit: deps.config.bodyLimitBytes, type: ['application/json', 'application/*+json'], strict: false });
  app.use((req, res, next) =>
    parseJson(req, res, (err?: unknown) => {
      // Kept for later: an unknown path is still a 404 and a missing credential still a 401.
      if (err) requestState(req).bodyError = err;
      next();
    }),
  );
  app.use(docsAssets());
  app.use((req, res) => router.handle(req, res));
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => sendError(req, res, err));
  return app;
}

/**
 * helmet's headers are the same on every response: computed once by running helmet against a
 * recording response, then set with the request id instead of running helmet per request.
 */
function helmetHeaders(): Array<[string, string | number | readonly string[]]> {
  const headers: Array<[string, string | number | readonly string[]]> = [];
  const recorder = {
    setHeader: (name: string, value: string | number | readonly string[]) => headers.push([name, value]),
    removeHeader: () => undefined,
  };
  let finished = false;
  helmet()({} as never, recorder as never, () => {
    finished = true;
  });
  if (!finished) throw new Error('helmet did not finish synchronously; its headers cannot be precomputed.');
  return headers;
}
