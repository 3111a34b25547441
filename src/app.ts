import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { pinoHttp } from 'pino-http';
import { handlers, notImplemented } from './areas';
import { presentedCredential } from './auth/credentials';
import type { AppDeps } from './http/context';
import { createOperationRouter, type Handlers } from './http/api';
import type { OperationId, OperationMeta } from '../generated/operations';
import { ApiError } from './http/errors';
import { rateLimit } from './http/rate-limit';
import { requestState, sendError, setRequestState } from './http/respond';
import { newId } from './lib/ids';
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

  app.use((req, res, next) => {
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && INCOMING_REQUEST_ID.test(incoming) ? incoming : newId('request');
    res.setHeader('X-Request-Id', requestId);
    setRequestState(req, { requestId, log: deps.logger, credential: presentedCredential(req.headers) });
    if (app.locals.draining) {
      res.setHeader('Connection', 'close');
      sendError(req, res, new ApiError('service_unavailable', 'The server is shutting down; retry shortly.', { headers: { 'Retry-After': '5' } }));
      return;
    }
    next();
  });
  app.use(
    pinoHttp({
      logger: deps.logger,
      genReqId: (req) => requestState(req as Request).requestId,
      customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'error' : 'info'),
      serializers: {
        req: (req) => ({ id: req.id, method: req.method, url: req.url, remoteAddress: req.remoteAddress }),
        res: (res) => ({ statusCode: res.statusCode }),
      },
    }),
  );
  app.use((req, _res, next) => {
    requestState(req).log = req.log;
    next();
  });
  app.use(helmet());
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
  app.use((req, res) => router.handle(req, res));
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => sendError(req, res, err));
  return app;
}
