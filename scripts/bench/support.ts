// What the in-process benches share: how many times to run, how a latency is measured, and a
// real app on loopback over a scratch database (DATABASE_URL, else the embedded one).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createApp } from '../../src/app';
import { insertConnector } from '../../src/areas/connectors/connectors.repo';
import { shareResource } from '../../src/access/shares';
import { loadConfig, type Config } from '../../src/config';
import { migrateToLatest, openDatabase, type DatabaseHandle } from '../../src/db/database';
import { createMailer } from '../../src/events/email';
import { secretBoxOf } from '../../src/lib/crypto';
import { Factories } from '../../test/support/factories';

/** Timed runs per figure (`BENCH_COUNT`, 10–5000, default 200). */
export const COUNT = Math.min(5000, Math.max(10, Number(process.env.BENCH_COUNT ?? 200)));

export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

export interface Latency {
  p50: number;
  p90: number;
  p99: number;
}

/** Milliseconds per `run`, after 20 warm-up runs; `before` runs untimed ahead of each one. */
export async function measure(run: () => Promise<unknown>, before?: () => Promise<unknown>): Promise<Latency> {
  for (let i = 0; i < Math.min(20, COUNT); i += 1) {
    if (before) await before();
    await run();
  }
  const times: number[] = [];
  for (let i = 0; i < COUNT; i += 1) {
    if (before) await before();
    const start = process.hrtime.bigint();
    await run();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p90: percentile(times, 90), p99: percentile(times, 99) };
}

export function openBenchDatabase(poolSize = 10): Promise<DatabaseHandle> {
  return openDatabase(process.env.DATABASE_URL ? { url: process.env.DATABASE_URL, poolSize } : {});
}

export interface BenchApp {
  database: DatabaseHandle;
  deps: Parameters<typeof createApp>[0] & { config: Config };
  server: Server;
  base: string;
  factories: Factories;
  close(): Promise<void>;
}

/** The app on 127.0.0.1 over a migrated scratch database, configured by `env` (silent logs, no rate limit). */
export async function startBenchApp(env: Record<string, string> = {}): Promise<BenchApp> {
  const database = await openBenchDatabase();
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-bench-'));
  await migrateToLatest(database.db);
  const config = loadConfig({
    NODE_ENV: 'test',
    DATA_DIR: dataDir,
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    LOG_LEVEL: 'silent',
    RATE_LIMIT_REQUESTS: '10000000',
    ...env,
  });
  const logger = pino({ level: 'silent' });
  const { listen, deps, close } = await createApp({
    config,
    db: database.db,
    pool: database.pool,
    listen: database.listen,
    secrets: secretBoxOf(config.encryptionKeys),
    mailer: createMailer(null, config.smtp.from, logger, 1000),
    logger,
  });
  const server = await listen(0, '127.0.0.1');
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  (config as { baseUrl: string }).baseUrl = base;
  return {
    database,
    deps,
    server,
    base,
    factories: new Factories(database.db),
    async close() {
      server.closeAllConnections();
      server.close();
      await close();
      await database.close();
      deps.mailer.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A custom connector with a bearer API key, visible to the whole organization: what the benches connect to. */
export async function addApiKeyConnector(db: DatabaseHandle['db'], orgId: string, slug: string, name: string, mcpUrl: string): Promise<void> {
  await insertConnector(db, {
    org_id: orgId,
    slug,
    content: {
      name,
      description: null,
      icon_url: null,
      mcp_url: mcpUrl,
      transport: 'streamable_http',
      auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
      tools: [],
      documentation: [],
    },
    client_secret_enc: null,
    upstream_slug: null,
    upstream_version: null,
    linked_at: null,
    created_by_user_id: null,
  });
  await shareResource(db, {
    orgId,
    resourceType: 'connector',
    resourceId: slug,
    share: { principal: { type: 'organization', id: orgId }, level: 'use' },
    byUserId: null,
  });
}

/**
 * Creates an email notification destination through the API at `baseUrl` with `headers` (a
 * token and organization): the row the benches read and list. Throws unless it answered 201.
 */
export async function createBenchDestination(baseUrl: string, headers: Record<string, string>, name = 'bench'): Promise<string> {
  // `set`, not a spread: headers that already name a content type (any case) keep one.
  const sent = new Headers(headers);
  sent.set('content-type', 'application/json');
  const created = await fetch(`${baseUrl}/notification-destination`, {
    method: 'POST',
    headers: sent,
    body: JSON.stringify({ name, type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] }),
    signal: AbortSignal.timeout(10_000),
  });
  const destination = (await created.json()) as { id?: string };
  if (created.status !== 201 || !destination.id) {
    throw new Error(`POST /notification-destination answered ${created.status}: ${JSON.stringify(destination)}`);
  }
  return destination.id;
}
