import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely';
import createClient, { type Client, type Middleware } from 'openapi-fetch';
import pino from 'pino';
import type { paths } from '../../generated/openapi';
import { createApp, type AppOptions } from '../../src/app';
import { loadConfig, type Config } from '../../src/config';
import type { CredentialCache } from '../../src/identity/credential-cache';
import type { DatabaseHandle, Db } from '../../src/db/database';
import { createMailer } from '../../src/events/email';
import type { AppDeps, ProcessDeps } from '../../src/http/context';
import { secretBoxOf } from '../../src/lib/crypto';
import { credentialOf, sendOp, type OperationId, type OpRequest, type OpResponse, type Who } from './client';
import { freshDatabase } from './database';
import { recordEvent } from './events-seen';
import { Factories } from './factories';
import { SpecChecker } from './spec-checker';

export interface TestResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface CallOptions {
  token?: string;
  session?: string;
  org?: string;
  headers?: Record<string, string>;
  /** A raw body sent as is (with its own content type in `headers`). */
  raw?: string | Buffer;
}

let sharedChecker: SpecChecker | null = null;

/**
 * A typed client call, answered in the shape `call` answers (status, headers, body, text), so
 * assertions read the same whichever client sent the request.
 */
export async function settle(call: Promise<{ data?: unknown; error?: unknown; response: Response }>): Promise<TestResponse> {
  const { data, error, response } = await call;
  const body = data ?? error;
  return { status: response.status, headers: response.headers, body, text: body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body) };
}

/**
 * The generated `paths`, except that X-Organization-Id is optional: the typed client sends
 * the organization it was made for on every call, so tests do not repeat it.
 */
type OrgHeaderOptional<P> = {
  [Path in keyof P]: {
    [M in keyof P[Path]]: P[Path][M] extends { parameters: infer Params }
      ? Params extends { header: infer H }
        ? Omit<P[Path][M], 'parameters'> & { parameters: Omit<Params, 'header'> & { header?: Omit<H, 'X-Organization-Id'> & { 'X-Organization-Id'?: string } } }
        : P[Path][M]
      : P[Path][M];
  };
};

/** A client typed by the spec, as SDK users generate one: a wrong path, parameter or body does not compile. */
export type ApiClient = Client<OrgHeaderOptional<paths>>;

export class TestApp {
  readonly factories: Factories;
  /** Every response that failed the spec check; afterEach hooks may assert it is empty. */
  readonly specProblems: string[] = [];

  constructor(
    readonly url: string,
    readonly database: DatabaseHandle,
    readonly deps: AppDeps,
    private readonly server: Server,
    private readonly closeApp: () => Promise<void>,
    private readonly checker: SpecChecker | null,
    /** Operations this app answers with 501 not_implemented. */
    readonly pending: ReadonlySet<string>,
    /** The app's credential cache (tests of the cache look inside). */
    readonly credentials: CredentialCache,
    /** Makes the app forget what it remembers of the database, as after a write of its own. */
    forget: () => void,
    /** Answers every request from now on with 503, as when the server shuts down. */
    readonly drain: () => void,
    /** The database is another app's (a replica's): closing this app leaves it open. */
    private readonly sharesDatabase = false,
    /** The metrics port's server (`/metrics`, `/ready`), when the test asked for it (TestAppOptions.metrics). */
    private readonly metricsServer: Server | null = null,
  ) {
    this.writer = database.db.withPlugin(new ForgetOnWrite(forget));
    this.factories = new Factories(this.writer);
  }

  private readonly writer: Db;

  /**
   * The test's own way into the database. Its writes stand in for operations not built yet,
   * so the app forgets what it remembers (credentials, served tools) after each one, as after a write of its own
   * (the notification from the database would come too, a moment later).
   */
  get db(): Db {
    return this.writer;
  }

  /** Sends a request and checks the response against the spec; a mismatch throws. */
  async call<T = any>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<TestResponse<T>> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token) headers.authorization = `Bearer ${options.token}`;
    if (options.session) headers.cookie = `__Host-cp_session=${options.session}`;
    if (options.org) headers['x-organization-id'] = options.org;
    let payload: string | Buffer | undefined;
    if (options.raw !== undefined) payload = options.raw;
    else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${this.url}${path}`, { method, headers, body: payload, redirect: 'manual' });
    const text = await res.text();
    const type = res.headers.get('content-type') ?? '';
    let parsed: unknown = text === '' ? undefined : text;
    if (type.includes('json') && text !== '') parsed = JSON.parse(text);
    if (this.checker) {
      const problems = this.checker.check(method.toLowerCase(), path, res.status, res.headers, parsed, this.pending);
      if (problems.length > 0) {
        this.specProblems.push(...problems);
        throw new Error(`Response of ${method} ${path} breaks the spec:\n${problems.join('\n')}`);
      }
    }
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  }

  /**
   * The typed client (openapi-fetch over the generated types), carrying a credential and an
   * organization. Every response is checked against the spec, as `call` does.
   */
  client(credential: { token?: string; session?: string; org?: string } = {}): ApiClient {
    const headers: Record<string, string> = {};
    if (credential.token) headers.authorization = `Bearer ${credential.token}`;
    if (credential.session) headers.cookie = `__Host-cp_session=${credential.session}`;
    if (credential.org) headers['x-organization-id'] = credential.org;
    const client = createClient<OrgHeaderOptional<paths>>({ baseUrl: this.url, headers });
    const checker = this.checker;
    if (checker) {
      const check: Middleware = {
        onResponse: async ({ request, response }) => {
          const text = await response.clone().text();
          const type = response.headers.get('content-type') ?? '';
          const body = text === '' ? undefined : type.includes('json') ? JSON.parse(text) : text;
          const problems = checker.check(request.method.toLowerCase(), new URL(request.url).pathname, response.status, response.headers, body, this.pending);
          if (problems.length > 0) {
            this.specProblems.push(...problems);
            throw new Error(`Response of ${request.method} ${new URL(request.url).pathname} breaks the spec:\n${problems.join('\n')}`);
          }
          return undefined;
        },
      };
      client.use(check);
    }
    return client;
  }

  /**
   * An operation by its id, typed from the generated types, sent as `who` (test/support/client.ts):
   * `t.op('getTeam', { params: { id } }, org)`. The answer is checked against the spec.
   */
  op<Id extends OperationId>(id: Id, request?: OpRequest<Id>, who?: Who): Promise<OpResponse<Id>> {
    return sendOp((method, path, body, options) => this.call(method, path, body, options), id, request, who);
  }

  /**
   * A caller: `op` sends operations by id, typed (`t.as(org).op('createTeam', { body })`); get,
   * post… send any request untyped, for requests the spec forbids. Both carry the credential
   * and organization, and both check answers against the spec.
   */
  as(who: Who) {
    const credential = credentialOf(who);
    const call = <T = any>(method: string, path: string, body?: unknown, extra: CallOptions = {}) =>
      this.call<T>(method, path, body, { ...credential, ...extra, headers: { ...extra.headers } });
    return {
      op: <Id extends OperationId>(id: Id, request?: OpRequest<Id>) => this.op(id, request, who),
      get: <T = any>(path: string, extra?: CallOptions) => call<T>('GET', path, undefined, extra),
      post: <T = any>(path: string, body?: unknown, extra?: CallOptions) => call<T>('POST', path, body, extra),
      patch: <T = any>(path: string, body?: unknown, extra?: CallOptions) => call<T>('PATCH', path, body, extra),
      put: <T = any>(path: string, body?: unknown, extra?: CallOptions) => call<T>('PUT', path, body, extra),
      delete: <T = any>(path: string, extra?: CallOptions) => call<T>('DELETE', path, undefined, extra),
    };
  }

  /** The metrics port's address (`http://127.0.0.1:<port>`); the app must have been started with `metrics: true`. */
  get metricsUrl(): string {
    if (!this.metricsServer) throw new Error('This test app serves no metrics; start it with { metrics: true }.');
    return `http://127.0.0.1:${(this.metricsServer.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    if (this.metricsServer) {
      this.metricsServer.closeAllConnections();
      await new Promise<void>((resolve) => this.metricsServer!.close(() => resolve()));
    }
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.deps.mailer.close();
    await this.closeApp();
    if (!this.sharesDatabase) await this.database.close();
  }
}

export interface TestAppOptions extends AppOptions {
  env?: Record<string, string>;
  /**
   * Another replica of this app: the same database (the same handle, so on the embedded
   * database its one connection is shared as on a server's pool) and encryption key, and its
   * own process state (caches, upstream sessions). Close it before the app it replicates.
   */
  replicaOf?: TestApp;
  /** Skip the spec check (for fixture specs the checker does not know). */
  checkSpec?: boolean;
  /** Serve `/metrics` and `/ready` on a loopback port of their own (TestApp.metricsUrl). */
  metrics?: boolean;
  /** The app's logger (tests of what is logged pass one writing to memory); else silent, or TEST_LOG_LEVEL. */
  logger?: pino.Logger;
}

/** The real app on a fresh database, listening on a loopback port. */
export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const database = options.replicaOf?.database ?? (await freshDatabase());
  const config: Config = loadConfig({
    NODE_ENV: 'test',
    DATA_DIR: mkdtempSync(join(tmpdir(), 'cp-test-')),
    ENCRYPTION_KEY: options.replicaOf?.deps.config.encryptionKeys.current.toString('hex') ?? randomBytes(32).toString('hex'),
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    OUTBOUND_ALLOW_LOOPBACK: 'true',
    RATE_LIMIT_REQUESTS: '100000',
    RATE_LIMIT_AUTH_FAILURES: '100000',
    // Every test registers MCP clients from 127.0.0.1; the limit has its own test.
    MCP_CLIENT_REGISTRATIONS_PER_HOUR: '100000',
    OUTBOUND_TIMEOUT_MS: '3000',
    // The webhook receiver on loopback stands in for Slack.
    SLACK_WEBHOOK_HOSTS: 'hooks.slack.com,127.0.0.1',
    // Tests send test messages back to back; the cooldown has its own test.
    NOTIFICATION_TEST_COOLDOWN_SECONDS: '0',
    // A known catalog (test/fixtures/catalog), whatever the shipped one holds.
    CATALOG_DIR: join(__dirname, '..', 'fixtures', 'catalog'),
    ...options.env,
  });
  const logger = options.logger ?? pino({ level: config.logLevel });
  const processDeps: ProcessDeps = {
    config,
    db: database.db,
    pool: database.pool,
    secrets: secretBoxOf(config.encryptionKeys),
    mailer: createMailer(config.smtp.url, config.smtp.from, logger, config.outbound.timeoutMs),
    logger,
    onEvent: recordEvent,
  };
  const {
    listen,
    listenMetrics,
    drain,
    registry,
    deps,
    credentials,
    forget,
    close: closeApp,
  } = await createApp({ ...processDeps, listen: database.listen }, options);
  const server: Server = await listen(0, '127.0.0.1');
  const metricsServer = options.metrics ? await listenMetrics(0, '127.0.0.1') : null;
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  (config as { baseUrl: string }).baseUrl = url;
  if (options.checkSpec !== false) sharedChecker ??= new SpecChecker();
  return new TestApp(
    url,
    database,
    deps,
    server,
    closeApp,
    options.checkSpec === false ? null : sharedChecker,
    registry.notImplemented,
    credentials,
    forget,
    drain,
    options.replicaOf !== undefined,
    metricsServer,
  );
}

/** Makes the app forget what it remembers after every statement that is not a select. */
class ForgetOnWrite implements KyselyPlugin {
  private readonly writes = new WeakSet<object>();

  constructor(private readonly forget: () => void) {}

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (args.node.kind !== 'SelectQueryNode') this.writes.add(args.queryId);
    return args.node;
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    if (this.writes.has(args.queryId)) this.forget();
    return args.result;
  }
}
