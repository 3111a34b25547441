import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createApp, type AppOptions } from '../../src/app';
import { notImplemented as defaultNotImplemented } from '../../src/areas';
import { loadConfig, type Config } from '../../src/config';
import type { DatabaseHandle } from '../../src/db/database';
import { createMailer } from '../../src/events/email';
import type { AppDeps } from '../../src/http/context';
import { SecretBox } from '../../src/lib/crypto';
import { freshDatabase } from './database';
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

export class TestApp {
  readonly factories: Factories;
  /** Every response that failed the spec check; afterEach hooks may assert it is empty. */
  readonly specProblems: string[] = [];

  constructor(
    readonly url: string,
    readonly database: DatabaseHandle,
    readonly deps: AppDeps,
    private readonly server: Server,
    private readonly checker: SpecChecker | null,
    /** Operations this app answers with 501 not_implemented. */
    readonly pending: ReadonlySet<string>,
  ) {
    this.factories = new Factories(database.db);
  }

  get db() {
    return this.database.db;
  }

  /** Sends a request and checks the response against the spec; a mismatch throws. */
  async call<T = any>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<TestResponse<T>> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token) headers.authorization = `Bearer ${options.token}`;
    if (options.session) headers.cookie = `cp_session=${options.session}`;
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

  /** A client whose requests carry the same credential and organization. */
  as(credential: { token?: string; session?: string; org?: string }) {
    const call = <T = any>(method: string, path: string, body?: unknown, extra: CallOptions = {}) =>
      this.call<T>(method, path, body, { ...credential, ...extra, headers: { ...extra.headers } });
    return {
      get: <T = any>(path: string, extra?: CallOptions) => call<T>('GET', path, undefined, extra),
      post: <T = any>(path: string, body?: unknown, extra?: CallOptions) => call<T>('POST', path, body, extra),
      patch: <T = any>(path: string, body?: unknown, extra?: CallOptions) => call<T>('PATCH', path, body, extra),
      put: <T = any>(path: string, body?: unknown, extra?: CallOptions) => call<T>('PUT', path, body, extra),
      delete: <T = any>(path: string, extra?: CallOptions) => call<T>('DELETE', path, undefined, extra),
    };
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.deps.mailer.close();
    await this.database.close();
  }
}

export interface TestAppOptions extends AppOptions {
  env?: Record<string, string>;
  /** Skip the spec check (for fixture specs the checker does not know). */
  checkSpec?: boolean;
}

/** The real app on a fresh database, listening on a loopback port. */
export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const database = await freshDatabase();
  const config: Config = loadConfig({
    NODE_ENV: 'test',
    DATA_DIR: mkdtempSync(join(tmpdir(), 'cp-test-')),
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    OUTBOUND_ALLOW_LOOPBACK: 'true',
    RATE_LIMIT_REQUESTS: '100000',
    RATE_LIMIT_AUTH_FAILURES: '100000',
    OUTBOUND_TIMEOUT_MS: '3000',
    ...options.env,
  });
  const logger = pino({ level: config.logLevel });
  const deps: AppDeps = {
    config,
    db: database.db,
    pool: database.pool,
    secrets: new SecretBox(config.encryptionKey),
    mailer: createMailer(config.smtp.url, config.smtp.from, logger, config.outbound.timeoutMs),
    logger,
  };
  const app = await createApp(deps, options);
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  (config as { baseUrl: string }).baseUrl = url;
  if (options.checkSpec !== false) sharedChecker ??= new SpecChecker();
  const pending = options.notImplemented ?? defaultNotImplemented;
  return new TestApp(url, database, deps, server, options.checkSpec === false ? null : sharedChecker, pending);
}
