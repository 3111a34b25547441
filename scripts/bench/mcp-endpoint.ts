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
//   throughput    both again with BENCH_CONCURRENCY requests in flight (default 8), req/s, in
//                 alternating bursts; the three latencies are measured in turns (one request of
//                 each, round after round), so a machine whose load drifts skews them alike
//   CPU           this process's CPU per call of each target (app, peers and client all run
//                 here: the difference is what the control plane's path costs)
//   tools/list    the endpoint listing a toolbox of BENCH_CONNECTIONS connections × BENCH_TOOLS
//                 tools (default 5 × 100), from the connections' tool caches
//
// Bounded: BENCH_COUNT sequential requests per latency target (default 200, at most 5000), and
// the same count per throughput target. DATABASE_URL names a scratch database, else embedded.
import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { newMcpToken } from '../../src/auth/mcp-tokens';
import { newId } from '../../src/lib/ids';
import { startApiKeyUpstream } from '../../test/support/upstream/api-key';
import { manyTools } from '../../test/support/upstream/mcp';
import { addApiKeyConnector, COUNT, measure, percentile, startBenchApp } from './support';

const CONCURRENCY = Math.min(64, Math.max(1, Number(process.env.BENCH_CONCURRENCY ?? 8)));
const CONNECTIONS = Math.min(20, Math.max(1, Number(process.env.BENCH_CONNECTIONS ?? 5)));
const TOOLS = Math.min(1000, Math.max(1, Number(process.env.BENCH_TOOLS ?? 100)));
const KEY = `bench-${randomBytes(8).toString('hex')}`;

async function throughput(run: () => Promise<void>, count = COUNT): Promise<{ rate: number; cpuMs: number }> {
  let next = 0;
  const cpu = process.cpuUsage();
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < count) {
      next += 1;
      await run();
    }
  }));
  const used = process.cpuUsage(cpu);
  return { rate: count / (Number(process.hrtime.bigint() - start) / 1e9), cpuMs: (used.user + used.system) / 1000 / count };
}

/**
 * Latencies of several targets measured in turns (one request of each, round after round),
 * so that a machine whose load changes during the run skews them alike; and this process's
 * CPU per request of each (the app, the upstream peers and the client all run here: the
 * difference between two targets is what the extra path costs in CPU).
 */
async function interleaved(runs: (() => Promise<unknown>)[]): Promise<{ p50: number; p90: number; p99: number; cpuMs: number }[]> {
  for (let i = 0; i < Math.min(20, COUNT); i += 1) for (const run of runs) await run();
  const times = runs.map(() => [] as number[]);
  const cpu = runs.map(() => 0);
  for (let i = 0; i < COUNT; i += 1) {
    for (const [k, run] of runs.entries()) {
      const before = process.cpuUsage();
      const start = process.hrtime.bigint();
      await run();
      (times[k] as number[]).push(Number(process.hrtime.bigint() - start) / 1e6);
      const used = process.cpuUsage(before);
      cpu[k] = (cpu[k] as number) + (used.user + used.system) / 1000;
    }
  }
  return times.map((list, k) => {
    list.sort((a, b) => a - b);
    return { p50: percentile(list, 50), p90: percentile(list, 90), p99: percentile(list, 99), cpuMs: (cpu[k] as number) / COUNT };
  });
}

/** Throughput of two targets in alternating bursts (a fifth of the count each, five times), summed: a changing load skews both alike. */
async function throughputPair(a: () => Promise<void>, b: () => Promise<void>) {
  const burst = Math.max(CONCURRENCY, Math.floor(COUNT / 5));
  const sum = { a: { time: 0, cpu: 0 }, b: { time: 0, cpu: 0 } };
  for (let i = 0; i < 5; i += 1) {
    for (const [key, run] of [['a', a], ['b', b]] as const) {
      const r = await throughput(run, burst);
      sum[key].time += burst / r.rate;
      sum[key].cpu += r.cpuMs * burst;
    }
  }
  return { a: { rate: (5 * burst) / sum.a.time, cpuMs: sum.a.cpu / (5 * burst) }, b: { rate: (5 * burst) / sum.b.time, cpuMs: sum.b.cpu / (5 * burst) } };
}

async function main() {
  const upstreams = await Promise.all(Array.from({ length: CONNECTIONS }, () => startApiKeyUpstream({ keys: { [KEY]: 'bench' }, tools: manyTools(TOOLS) })));
  const { database, base, factories, close } = await startBenchApp({ OUTBOUND_ALLOW_LOOPBACK: 'true', CONNECTION_TOOLS_TTL_SECONDS: '3600' });
  const org = await factories.org();
  const headers = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId, 'content-type': 'application/json' };
  for (const [i, upstream] of upstreams.entries()) {
    const slug = `bench-${i}`;
    await addApiKeyConnector(database.db, org.orgId, slug, `Bench ${i}`, `${new URL(upstream.url).origin}/mcp`);
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

  const [d, sdk, v] = (await interleaved([direct, session, viaCp])) as [Awaited<ReturnType<typeof interleaved>>[number], Awaited<ReturnType<typeof interleaved>>[number], Awaited<ReturnType<typeof interleaved>>[number]];
  const rates = await throughputPair(direct, viaCp);
  const dRate = rates.a.rate;
  const vRate = rates.b.rate;
  const l = await measure(list);
  const db = process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded PGlite';
  const fmt = (r: { p50: number; p90: number; p99: number }) => `p50 ${r.p50.toFixed(2).padStart(7)} ms   p90 ${r.p90.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms`;
  console.log(`MCP endpoint, ${COUNT} requests per target, ${db}:`);
  console.log(`  tools/call direct (upstream)        ${fmt(d)}`);
  console.log(`  tools/call direct, SDK session      ${fmt(sdk)}`);
  console.log(`  tools/call via control plane        ${fmt(v)}   added p50 ${(v.p50 - d.p50).toFixed(2)} ms`);
  console.log(`  CPU of this process per call        direct ${d.cpuMs.toFixed(2)} ms   SDK session ${sdk.cpuMs.toFixed(2)} ms   via control plane ${v.cpuMs.toFixed(2)} ms   added ${(v.cpuMs - d.cpuMs).toFixed(2)} ms`);
  console.log(`  throughput at ${CONCURRENCY} in flight          direct ${dRate.toFixed(0)} req/s   via control plane ${vRate.toFixed(0)} req/s   ratio ${(vRate / dRate).toFixed(2)}   (CPU per call ${rates.a.cpuMs.toFixed(2)} / ${rates.b.cpuMs.toFixed(2)} ms)`);
  console.log(`  tools/list, ${CONNECTIONS} × ${TOOLS} tools          ${fmt(l)}`);

  await close();
  for (const upstream of upstreams) await upstream.close();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
