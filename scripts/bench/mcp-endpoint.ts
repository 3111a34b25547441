// `npx tsx scripts/bench/mcp-endpoint.ts`: what the MCP endpoint `/mcp/{mcpId}` adds, in one
// run on loopback (the app in this process, upstreams the test peers' API-key MCP servers).
//
//   call direct   one `tools/call` of a trivial tool (echo) POSTed straight to the upstream
//                 (stateless Streamable HTTP, no session), as the floor
//   session       the same call in a whole SDK client session (initialize, tools/call, close):
//                 what the control plane does upstream for each call, as its own floor
//   call via cp   the same `tools/call` POSTed to the control plane's endpoint with an MCP
//                 server token: authentication, the user toolbox and policy, then a whole
//                 upstream MCP exchange (initialize, tools/call, close) with the connection's
//                 key, and the tool-call record
//   throughput    both again with BENCH_CONCURRENCY requests in flight (default 8), req/s
//   tools/list    the endpoint listing a toolbox of BENCH_CONNECTIONS connections × BENCH_TOOLS
//                 tools (default 5 × 100), from the connections' tool caches
//
// Bounded: BENCH_COUNT sequential requests per latency target (default 200, at most 5000), and
// the same count per throughput target. DATABASE_URL names a scratch database, else embedded.
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
import { newMcpToken } from '../../src/auth/mcp-tokens';
import { shareResource } from '../../src/auth/shares';
import { loadConfig } from '../../src/config';
import { migrateToLatest, openDatabase } from '../../src/db/database';
import { createMailer } from '../../src/events/email';
import { secretBoxOf } from '../../src/lib/crypto';
import { newId } from '../../src/lib/ids';
import { Factories } from '../../test/support/factories';
import { startApiKeyUpstream } from '../../test/support/upstream/api-key';
import { manyTools } from '../../test/support/upstream/mcp';

const COUNT = Math.min(5000, Math.max(10, Number(process.env.BENCH_COUNT ?? 200)));
const CONCURRENCY = Math.min(64, Math.max(1, Number(process.env.BENCH_CONCURRENCY ?? 8)));
const CONNECTIONS = Math.min(20, Math.max(1, Number(process.env.BENCH_CONNECTIONS ?? 5)));
const TOOLS = Math.min(1000, Math.max(1, Number(process.env.BENCH_TOOLS ?? 100)));
const KEY = `bench-${randomBytes(8).toString('hex')}`;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;

async function latency(run: () => Promise<void>) {
  for (let i = 0; i < Math.min(20, COUNT); i += 1) await run();
  const times: number[] = [];
  for (let i = 0; i < COUNT; i += 1) {
    const start = process.hrtime.bigint();
    await run();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p90: percentile(times, 90), p99: percentile(times, 99) };
}

async function throughput(run: () => Promise<void>): Promise<number> {
  let next = 0;
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < COUNT) {
      next += 1;
      await run();
    }
  }));
  return COUNT / (Number(process.hrtime.bigint() - start) / 1e9);
}

async function main() {
  const upstreams = await Promise.all(Array.from({ length: CONNECTIONS }, () => startApiKeyUpstream({ keys: { [KEY]: 'bench' }, tools: manyTools(TOOLS) })));
  const database = await openDatabase(process.env.DATABASE_URL ? { url: process.env.DATABASE_URL, poolSize: 10 } : {});
  await migrateToLatest(database.db);
  const config = loadConfig({
    NODE_ENV: 'test', DATA_DIR: mkdtempSync(join(tmpdir(), 'cp-bench-')), ENCRYPTION_KEY: randomBytes(32).toString('hex'), LOG_LEVEL: 'silent',
    OUTBOUND_ALLOW_LOOPBACK: 'true', RATE_LIMIT_REQUESTS: '10000000', CONNECTION_TOOLS_TTL_SECONDS: '3600',
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
  const headers = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId, 'content-type': 'application/json' };
  for (const [i, upstream] of upstreams.entries()) {
    const slug = `bench-${i}`;
    await insertConnector(database.db, {
      org_id: org.orgId, slug,
      content: { name: `Bench ${i}`, description: null, icon_url: null, mcp_url: `${new URL(upstream.url).origin}/mcp`, transport: 'streamable_http', auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' }, tools: [], documentation: [] },
      client_secret_enc: null, upstream_slug: null, upstream_version: null, linked_at: null, created_by_user_id: null,
    });
    await shareResource(database.db, { orgId: org.orgId, resourceType: 'connector', resourceId: slug, share: { principal: { type: 'organization', id: org.orgId }, level: 'use' }, byUserId: null });
    const created = await fetch(`${base}/connection`, { method: 'POST', headers, body: JSON.stringify({ connector_slug: slug, api_key: KEY }) });
    if (created.status !== 201) throw new Error(`createConnection answered ${created.status}: ${await created.text()}`);
  }
  const minted = newMcpToken();
  const mcpId = newId('mcpServer');
  await database.db.insertInto('mcp_servers').values({ id: mcpId, org_id: org.orgId, owner_user_id: org.ownerId, user_toolbox_id: 'utbx_dyn_all', name: 'Bench', token_hash: minted.hash, token_hint: minted.hint }).execute();

  const rpc = (url: string, auth: string, body: object) => async () => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status !== 200 || !text.includes('"result"')) throw new Error(`${url} answered ${res.status}: ${text.slice(0, 300)}`);
  };
  const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } };
  const direct = rpc(`${new URL(upstreams[0]!.url).origin}/mcp`, KEY, call);
  // What the control plane does upstream for each call: a whole SDK session (initialize, tools/call, close).
  const session = async () => {
    const client = new Client({ name: 'bench', version: '0' }, { capabilities: {} });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${new URL(upstreams[0]!.url).origin}/mcp`), { requestInit: { headers: { authorization: `Bearer ${KEY}` } } }));
    await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
    await client.close();
  };
  const viaCp = rpc(`${base}/mcp/${mcpId}`, minted.token, { ...call, params: { ...call.params, name: 'bench-0__echo' } });
  const list = rpc(`${base}/mcp/${mcpId}`, minted.token, { jsonrpc: '2.0', id: 2, method: 'tools/list' });

  const d = await latency(direct);
  const sdk = await latency(session);
  const v = await latency(viaCp);
  const dRate = await throughput(direct);
  const vRate = await throughput(viaCp);
  const l = await latency(list);
  const db = process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded PGlite';
  const fmt = (r: { p50: number; p90: number; p99: number }) => `p50 ${r.p50.toFixed(2).padStart(7)} ms   p90 ${r.p90.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms`;
  console.log(`MCP endpoint, ${COUNT} requests per target, ${db}:`);
  console.log(`  tools/call direct (upstream)        ${fmt(d)}`);
  console.log(`  tools/call direct, SDK session      ${fmt(sdk)}`);
  console.log(`  tools/call via control plane        ${fmt(v)}   added p50 ${(v.p50 - d.p50).toFixed(2)} ms`);
  console.log(`  throughput at ${CONCURRENCY} in flight          direct ${dRate.toFixed(0)} req/s   via control plane ${vRate.toFixed(0)} req/s   ratio ${(vRate / dRate).toFixed(2)}`);
  console.log(`  tools/list, ${CONNECTIONS} × ${TOOLS} tools          ${fmt(l)}`);

  server.closeAllConnections();
  server.close();
  await close();
  await database.close();
  for (const upstream of upstreams) await upstream.close();
  deps.mailer.close();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
