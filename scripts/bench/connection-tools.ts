// `npx tsx scripts/bench/connection-tools.ts`: what GET /connection/{id}/tools costs against
// calling the upstream MCP server directly with the SDK client, in one run on loopback.
//
//   direct  the SDK Client over Streamable HTTP with the key, as any MCP client: initialize,
//           tools/list (every page), end of session. The floor for a cold answer.
//   cold    GET /connection/{id}/tools with the cache emptied before each request: the server
//           resolves the connector, opens the key, and does what `direct` does through the
//           outbound guard, then stores the list and answers a page.
//   warm    the same request answered from the cache (CONNECTION_TOOLS_TTL_SECONDS).
//
// Requests are sequential (one at a time): a latency figure, not a throughput one. The app
// runs in this process on an embedded database (or DATABASE_URL's), the upstream is the test
// peers' API-key MCP server (SDK McpServer, stateless Streamable HTTP).
//
// Settings: BENCH_COUNT requests per target (default 200, at most 5000), BENCH_TOOLS tools
// the upstream offers (default 40, in pages of 20).
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import pino from 'pino';
import { createApp } from '../../src/app';
import { insertConnector } from '../../src/areas/connectors/connectors.repo';
import { shareResource } from '../../src/auth/shares';
import { loadConfig } from '../../src/config';
import { migrateToLatest, openDatabase } from '../../src/db/database';
import { createMailer } from '../../src/events/email';
import { secretBoxOf } from '../../src/lib/crypto';
import { Factories } from '../../test/support/factories';
import { startApiKeyUpstream } from '../../test/support/upstream/api-key';
import { manyTools } from '../../test/support/upstream/mcp';

const COUNT = Math.min(5000, Math.max(10, Number(process.env.BENCH_COUNT ?? 200)));
const TOOLS = Math.min(2000, Math.max(1, Number(process.env.BENCH_TOOLS ?? 40)));
const KEY = `bench-${randomBytes(8).toString('hex')}`;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

async function measure(label: string, before: (() => Promise<void>) | null, run: () => Promise<void>) {
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
  return { label, p50: percentile(times, 50), p90: percentile(times, 90), p99: percentile(times, 99) };
}

async function main() {
  const upstream = await startApiKeyUpstream({ keys: { [KEY]: 'bench' }, tools: manyTools(TOOLS), pageSize: 20 });
  const database = await openDatabase(process.env.DATABASE_URL ? { url: process.env.DATABASE_URL, poolSize: 10 } : {});
  await migrateToLatest(database.db);
  const config = loadConfig({
    NODE_ENV: 'test',
    DATA_DIR: mkdtempSync(join(tmpdir(), 'cp-bench-')),
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    LOG_LEVEL: 'silent',
    OUTBOUND_ALLOW_LOOPBACK: 'true',
    RATE_LIMIT_REQUESTS: '10000000',
    CONNECTION_TOOLS_TTL_SECONDS: '3600',
  });
  const logger = pino({ level: 'silent' });
  const deps = { config, db: database.db, pool: database.pool, listen: database.listen, secrets: secretBoxOf(config.encryptionKeys), mailer: createMailer(null, config.smtp.from, logger, 1000), logger };
  const { app, close } = await createApp(deps);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  (config as { baseUrl: string }).baseUrl = base;

  const factories = new Factories(database.db);
  const org = await factories.org();
  const mcpUrl = `${new URL(upstream.url).origin}/mcp`;
  await insertConnector(database.db, {
    org_id: org.orgId, slug: 'bench-crm',
    content: { name: 'Bench CRM', description: null, icon_url: null, mcp_url: mcpUrl, transport: 'streamable_http', auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' }, tools: [], documentation: [] },
    client_secret_enc: null, upstream_slug: null, upstream_version: null, linked_at: null, created_by_user_id: null,
  });
  await shareResource(database.db, { orgId: org.orgId, resourceType: 'connector', resourceId: 'bench-crm', share: { principal: { type: 'organization', id: org.orgId }, level: 'use' }, byUserId: null });
  const headers = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId, 'content-type': 'application/json' };
  const created = await fetch(`${base}/connection`, { method: 'POST', headers, body: JSON.stringify({ connector_slug: 'bench-crm', api_key: KEY }) });
  if (created.status !== 201) throw new Error(`createConnection answered ${created.status}: ${await created.text()}`);
  const { id } = (await created.json()) as { id: string };

  const listViaApi = async () => {
    const res = await fetch(`${base}/connection/${id}/tools?limit=50`, { headers });
    if (res.status !== 200) throw new Error(`listConnectionTools answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  };
  const emptyCache = async () => {
    await database.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
  };
  const direct = async () => {
    const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { authorization: `Bearer ${KEY}` } } });
    const client = new Client({ name: 'bench', version: '0' }, { capabilities: {} });
    await client.connect(transport);
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      cursor = page.nextCursor;
    } while (cursor);
    await client.close();
  };

  const results = [await measure('direct (SDK client → upstream)', null, direct), await measure('cold (API, cache empty)', emptyCache, listViaApi), await measure('warm (API, from cache)', null, listViaApi)];
  const floor = results[0]!.p50;
  console.log(`listConnectionTools, ${COUNT} sequential requests per target, upstream with ${TOOLS} tools in pages of 20, ${process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded PGlite'}:`);
  for (const r of results) {
    console.log(`  ${r.label.padEnd(34)} p50 ${r.p50.toFixed(2).padStart(7)} ms   p90 ${r.p90.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms   p50 ${(r.p50 / floor).toFixed(2)}× direct`);
  }

  server.closeAllConnections();
  server.close();
  await close();
  await database.close();
  await upstream.close();
  deps.mailer.close();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
