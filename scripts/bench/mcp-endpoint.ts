// `npx tsx scripts/bench/mcp-endpoint.ts` (`make bench-mcp`): what the MCP endpoint `/mcp/{mcpId}`
// adds, on loopback, with each role in a process of its own:
//
//   upstream peers   a child process (scripts/bench/upstream-peers.ts): BENCH_CONNECTIONS API-key
//                    MCP servers (the test peers) with BENCH_TOOLS tools each, besides `echo`
//   control plane    a child process: the real server (dist/src/main.js built now, or src/main.ts
//                    through tsx with BENCH_SOURCE=1) in production mode, at the default log level
//                    with its stdout thrown away, on a scratch PostgreSQL database
//                    `cp_bench_<pid>_<random>` on the server at BENCH_DATABASE_URL (dropped at the
//                    end, also on Ctrl-C), loopback upstreams allowed, tool lists kept an hour, a
//                    rate limit that never trips
//   load generator   this process (fetch), which also seeds the database (an organization, its
//                    owner and token, one connector per upstream, a connection to each through the
//                    API, an MCP server serving `utbx_dyn_all`)
//
//   call direct   one `tools/call` of a trivial tool (echo) POSTed straight to the upstream
//                 (stateless Streamable HTTP, no session)
//   session       the same call in a whole SDK client session from this process (initialize,
//                 tools/call, close), as a reference
//   bare proxy    the same call through a bare Express proxy in a process of its own
//                 (scripts/bench/bare-proxy.ts: parse, forward over a kept-alive connection,
//                 relay): what any gateway adds on this machine, the floor of `added`
//   call via cp   the same `tools/call` POSTed to the control plane's endpoint with an MCP
//                 server token: authentication, the user toolbox and policy, the upstream call
//                 with the connection's key, and the tool-call record
//   throughput    direct and via cp with BENCH_CONCURRENCY requests in flight (default 8), req/s,
//                 in alternating bursts; the three latencies are measured in turns (one request of
//                 each, round after round), so a machine whose load drifts skews them alike
//   CPU           per call in those throughput bursts, of each process: this one (process.cpuUsage),
//                 the control plane and the upstream peers (/proc/<pid>/stat), and the PostgreSQL
//                 backends of the scratch database (/proc, when the server runs on this machine):
//                 the difference between the two targets is what the control plane's path costs
//   tools/list    the endpoint listing a toolbox of BENCH_CONNECTIONS connections × BENCH_TOOLS
//                 tools (default 5 × 100), from the connections' tool caches
//
// OTEL_* variables of this process are passed to the control plane (its traces: scripts/bench/tracing.ts).
//
// BENCH_COMPARE=<dir>: a second control plane, another build (<dir>/src/main.js, a folder of this
// checkout so that it finds node_modules), on the same database, measured in the same turns and
// bursts: a change's effect on the hot path, which runs of their own cannot show on a machine
// whose load drifts (two runs of one build differed by 0.008 ms at p50 this way). Build the
// revision to compare with, e.g.: git stash; npx tsc -p tsconfig.build.json --outDir
// dist-compare; git stash pop; then BENCH_COMPARE=dist-compare make bench-mcp. Both builds must
// know the same migrations (the compared one starts on the database this one migrated). With a
// fifth target the turns are longer and every ratio moves: read the two builds against each other.
//
// Bounded: BENCH_COUNT sequential requests per latency target (default 1000, at most 5000), and
// the same count per throughput target.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { newMcpToken } from '../../src/identity/mcp-tokens';
import { openDatabase, type DatabaseHandle } from '../../src/db/database';
import { newId } from '../../src/lib/ids';
import { Factories } from '../../test/support/factories';
import {
  atCleanup,
  backendCpuMs,
  backendCpuSpent,
  cleanUpOnSignals,
  cleanup,
  cpuMs,
  firstLine,
  freePort,
  interrupted,
  realServerArgs,
  startChild,
  startRealServer,
  stopChild,
  tsxArgs,
} from './processes';
import { createScratchDatabase, SERVER_URL } from './scratch-database';
import { addApiKeyConnector, measure, percentile } from './support';

/**
 * tools/call requests per target (BENCH_COUNT, 10–5000, default 1000): fewer leave the upstream
 * peers still warming up (their CPU per call falls by a third over the first thousand), which
 * flatters the ratios.
 */
const CALLS = Math.min(5000, Math.max(10, Number(process.env.BENCH_COUNT ?? 1000)));
const CONCURRENCY = Math.min(64, Math.max(1, Number(process.env.BENCH_CONCURRENCY ?? 8)));
const CONNECTIONS = Math.min(20, Math.max(1, Number(process.env.BENCH_CONNECTIONS ?? 5)));
const TOOLS = Math.min(1000, Math.max(1, Number(process.env.BENCH_TOOLS ?? 100)));
const KEY = `bench-${randomBytes(8).toString('hex')}`;
const COMPARE = process.env.BENCH_COMPARE ? resolve(process.env.BENCH_COMPARE, 'src', 'main.js') : null;

cleanUpOnSignals();

/** CPU ms used so far by each process of the bench (null where /proc cannot tell). */
interface CpuReading {
  loadGenerator: NodeJS.CpuUsage;
  controlPlane: number | null;
  upstreams: number | null;
  postgres: Map<number, number> | null;
}

/** CPU ms per call of each process over a run of calls; null where it could not be read. */
interface CpuPerCall {
  loadGenerator: number;
  controlPlane: number | null;
  upstreams: number | null;
  postgres: number | null;
}

interface Processes {
  controlPlane: number;
  upstreams: number;
  database: string;
}

async function readCpu(procs: Processes): Promise<CpuReading> {
  // PostgreSQL first: its query (on the maintenance database) costs this process some CPU, not counted.
  const postgres = await backendCpuMs(procs.database);
  return { postgres, controlPlane: cpuMs(procs.controlPlane), upstreams: cpuMs(procs.upstreams), loadGenerator: process.cpuUsage() };
}

function spent(before: CpuReading, after: CpuReading, calls: number): CpuPerCall {
  const diff = (a: number | null, b: number | null) => (a === null || b === null ? null : (b - a) / calls);
  const postgres = backendCpuSpent(before.postgres, after.postgres);
  return {
    loadGenerator: (after.loadGenerator.user + after.loadGenerator.system - before.loadGenerator.user - before.loadGenerator.system) / 1000 / calls,
    controlPlane: diff(before.controlPlane, after.controlPlane),
    upstreams: diff(before.upstreams, after.upstreams),
    postgres: postgres === null ? null : postgres / calls,
  };
}

/** `count` calls of `run` with CONCURRENCY in flight: calls per second, and each process's CPU per call. */
async function throughput(run: () => Promise<void>, count: number, procs: Processes): Promise<{ seconds: number; cpu: CpuPerCall }> {
  let next = 0;
  const before = await readCpu(procs);
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) {
        next += 1;
        await run();
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return { seconds, cpu: spent(before, await readCpu(procs), count) };
}

/**
 * Latencies of several targets measured in turns (one request of each, round after round),
 * so that a machine whose load changes during the run skews them alike.
 */
async function interleaved(runs: (() => Promise<unknown>)[]): Promise<{ p50: number; p90: number; p99: number }[]> {
  for (let i = 0; i < Math.min(20, CALLS); i += 1) for (const run of runs) await run();
  const times = runs.map(() => [] as number[]);
  for (let i = 0; i < CALLS; i += 1) {
    for (const [k, run] of runs.entries()) {
      const start = process.hrtime.bigint();
      await run();
      (times[k] as number[]).push(Number(process.hrtime.bigint() - start) / 1e6);
    }
  }
  return times.map((list) => {
    list.sort((a, b) => a - b);
    return { p50: percentile(list, 50), p90: percentile(list, 90), p99: percentile(list, 99) };
  });
}

/**
 * Throughput of several targets in alternating bursts (a fifth of the count each, five times),
 * summed: a changing load skews them alike. Each target names the processes its CPU is read
 * from (its gateway in the `controlPlane` slot).
 */
async function throughputRounds(targets: { run: () => Promise<void>; procs: Processes }[]) {
  const burst = Math.max(CONCURRENCY, Math.floor(CALLS / 5));
  const add = (x: number | null, y: number | null) => (x === null || y === null ? null : x + y);
  const sums = targets.map(() => ({ seconds: 0, cpu: { loadGenerator: 0, controlPlane: 0, upstreams: 0, postgres: 0 } as CpuPerCall }));
  for (let i = 0; i < 5; i += 1) {
    for (const [k, target] of targets.entries()) {
      const r = await throughput(target.run, burst, target.procs);
      const s = sums[k]!;
      s.seconds += r.seconds;
      // Per-call figures of equal bursts: their mean is the sum divided by the number of bursts.
      s.cpu = {
        loadGenerator: s.cpu.loadGenerator + r.cpu.loadGenerator / 5,
        controlPlane: add(s.cpu.controlPlane, r.cpu.controlPlane === null ? null : r.cpu.controlPlane / 5),
        upstreams: add(s.cpu.upstreams, r.cpu.upstreams === null ? null : r.cpu.upstreams / 5),
        postgres: add(s.cpu.postgres, r.cpu.postgres === null ? null : r.cpu.postgres / 5),
      };
    }
  }
  const total = 5 * burst;
  return { calls: total, results: sums.map((s) => ({ rate: total / s.seconds, cpu: s.cpu })) };
}

/**
 * BENCH_PROFILE_OUT: a directory to write the .cpuprofile of the control plane and of the bare
 * proxy to (CPU.<date>.<time>.<pid>…; open them in Chrome DevTools or speedscope): the floor's
 * profile is what the control plane's is read against.
 */
const PROFILE_DIR = process.env.BENCH_PROFILE_OUT ? resolve(process.env.BENCH_PROFILE_OUT) : null;
const profileArgs = () => (PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []);

const loads = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

async function main(): Promise<void> {
  const cpu = cpus();
  console.log(`Machine: ${cpu.length} CPU(s), ${cpu[0]?.model ?? 'unknown'}; Node ${process.version}; load average ${loads()} at start`);
  const real = realServerArgs();
  const scratch = await createScratchDatabase();
  atCleanup(() => scratch.drop());

  const peers = startChild(
    'the upstream peers',
    tsxArgs('scripts/bench/upstream-peers.ts'),
    { NODE_ENV: 'production', BENCH_CONNECTIONS: String(CONNECTIONS), BENCH_TOOLS: String(TOOLS), BENCH_UPSTREAM_KEY: KEY },
    'pipe',
  );
  const { urls } = JSON.parse(await firstLine(peers)) as { urls: string[] };
  if (urls.length !== CONNECTIONS) throw new Error(`the upstream peers started ${urls.length} servers, not ${CONNECTIONS}`);
  const upstreamMcp = urls.map((url) => `${new URL(url).origin}/mcp`);
  const floorPort = await freePort();
  const floor = startChild(
    'the bare proxy',
    [...profileArgs(), ...tsxArgs('scripts/bench/bare-proxy.ts')],
    { NODE_ENV: 'production', PORT: String(floorPort), UPSTREAM_URL: upstreamMcp[0]!, UPSTREAM_KEY: KEY },
    'pipe',
  );
  await firstLine(floor);

  // src/main.ts migrates the database before it listens.
  const serverEnv = {
    NODE_ENV: 'production',
    DATABASE_URL: scratch.url,
    // One key for both builds when comparing: the connections' keys are sealed with it.
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    OUTBOUND_ALLOW_LOOPBACK: 'true',
    CONNECTION_TOOLS_TTL_SECONDS: '3600',
    RATE_LIMIT_REQUESTS: '10000000',
    // Tracing settings given to the bench go to the server (scripts/bench/tracing.ts runs it with and without).
    ...Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => e[0].startsWith('OTEL_') && e[1] !== undefined)),
  };
  const server = await startRealServer(real.args, serverEnv, {}, profileArgs());
  const base = server.baseUrl;
  if (COMPARE && !existsSync(COMPARE)) throw new Error(`BENCH_COMPARE: ${COMPARE} does not exist (build the other revision there first)`);
  const compared = COMPARE ? await startRealServer([COMPARE], serverEnv) : null;
  if (compared) console.log(`Compared build: ${COMPARE}, pid ${compared.child.process.pid}, on the same database.`);
  console.log(
    `Control plane: ${real.how}, pid ${server.child.process.pid}; upstream peers: pid ${peers.process.pid}; PostgreSQL database ${scratch.name} on ${new URL(SERVER_URL).host}.`,
  );

  // Seeding, through a handle of this process's own, closed before the measurements.
  const database: DatabaseHandle = await openDatabase({ url: scratch.url, poolSize: 2 });
  let closed: Promise<void> | null = null;
  const closeDatabase = () => (closed ??= Promise.race([database.close(), new Promise<void>((r) => setTimeout(r, 5_000).unref())]));
  atCleanup(closeDatabase);
  const factories = new Factories(database.db);
  const org = await factories.org();
  const headers = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId, 'content-type': 'application/json' };
  for (const [i, url] of upstreamMcp.entries()) {
    const slug = `bench-${i}`;
    await addApiKeyConnector(database.db, org.orgId, slug, `Bench ${i}`, url);
    const created = await fetch(`${base}/connection`, { method: 'POST', headers, body: JSON.stringify({ connector_slug: slug, api_key: KEY }) });
    if (created.status !== 201) throw new Error(`createConnection answered ${created.status}: ${await created.text()}`);
  }
  const minted = newMcpToken();
  const mcpId = newId('mcpServer');
  await database.db
    .insertInto('mcp_servers')
    .values({
      id: mcpId,
      org_id: org.orgId,
      owner_user_id: org.ownerId,
      user_toolbox_id: 'utbx_dyn_all',
      name: 'Bench',
      token_hash: minted.hash,
      token_hint: minted.hint,
    })
    .execute();
  await closeDatabase();

  const rpc = (url: string, auth: string, body: object) => async () => {
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${auth}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status !== 200 || !text.includes('"result"')) throw new Error(`${url} answered ${res.status}: ${text.slice(0, 300)}`);
  };
  const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } };
  const direct = rpc(upstreamMcp[0]!, KEY, call);
  // A whole SDK session per call (initialize, tools/call, close), as a reference.
  const session = async () => {
    const client = new Client({ name: 'bench', version: '0' }, { capabilities: {} });
    await client.connect(new StreamableHTTPClientTransport(new URL(upstreamMcp[0]!), { requestInit: { headers: { authorization: `Bearer ${KEY}` } } }));
    await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
    await client.close();
  };
  const viaCp = rpc(`${base}/mcp/${mcpId}`, minted.token, { ...call, params: { ...call.params, name: 'bench-0__echo' } });
  const list = rpc(`${base}/mcp/${mcpId}`, minted.token, { jsonrpc: '2.0', id: 2, method: 'tools/list' });

  const procs: Processes = { controlPlane: server.child.process.pid!, upstreams: peers.process.pid!, database: scratch.name };
  // The floor: the same call through a bare Express proxy (scripts/bench/bare-proxy.ts).
  const viaFloor = rpc(`http://127.0.0.1:${floorPort}/mcp`, 'none', call);
  const viaCompared = compared ? rpc(`${compared.baseUrl}/mcp/${mcpId}`, minted.token, { ...call, params: { ...call.params, name: 'bench-0__echo' } }) : null;
  type Latency = Awaited<ReturnType<typeof interleaved>>[number];
  const latencies = await interleaved([direct, session, viaFloor, viaCp, ...(viaCompared ? [viaCompared] : [])]);
  const [d, sdk, f, v] = latencies as [Latency, Latency, Latency, Latency];
  const rounds = await throughputRounds([
    { run: direct, procs },
    { run: viaFloor, procs: { ...procs, controlPlane: floor.process.pid! } },
    { run: viaCp, procs },
    ...(viaCompared && compared ? [{ run: viaCompared, procs: { ...procs, controlPlane: compared.child.process.pid! } }] : []),
  ]);
  const [rd, rf, rv] = rounds.results as [(typeof rounds.results)[number], (typeof rounds.results)[number], (typeof rounds.results)[number]];
  const l = await measure(list);

  const fmt = (r: { p50: number; p90: number; p99: number }) =>
    `p50 ${r.p50.toFixed(2).padStart(7)} ms   p90 ${r.p90.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms`;
  const ms = (x: number | null) => (x === null ? '   n/a' : x.toFixed(3).padStart(6));
  const cpuLine = (c: CpuPerCall) => {
    const all = c.controlPlane === null || c.upstreams === null ? null : c.loadGenerator + c.controlPlane + c.upstreams + (c.postgres ?? 0);
    return `load generator ${ms(c.loadGenerator)}   control plane ${ms(c.controlPlane)}   upstream peers ${ms(c.upstreams)}   postgres ${ms(c.postgres)}   all ${ms(all)} ms`;
  };
  const added = (a: number | null, b: number | null) => (a === null || b === null ? null : b - a);
  const dc = rd.cpu;
  const fc = rf.cpu;
  const vc = rv.cpu;
  console.log(`MCP endpoint, ${CALLS} tools/call requests per target, PostgreSQL; control plane, upstream peers and load generator in separate processes:`);
  console.log(`  tools/call direct (upstream)        ${fmt(d)}`);
  console.log(`  tools/call direct, SDK session      ${fmt(sdk)}`);
  console.log(
    `  tools/call via a bare proxy         ${fmt(f)}   added p50 ${(f.p50 - d.p50).toFixed(2)} ms (the floor: Express, JSON, one kept-alive forward)`,
  );
  console.log(
    `  tools/call via control plane        ${fmt(v)}   added p50 ${(v.p50 - d.p50).toFixed(2)} ms   above the floor ${(v.p50 - f.p50).toFixed(2)} ms`,
  );
  console.log(
    `  throughput at ${CONCURRENCY} in flight          direct ${rd.rate.toFixed(0)} req/s   via control plane ${rv.rate.toFixed(0)} req/s   ratio ${(rv.rate / rd.rate).toFixed(2)}   (via the bare proxy ${rf.rate.toFixed(0)} req/s, ratio ${(rf.rate / rd.rate).toFixed(2)})`,
  );
  console.log(`  CPU per call in those bursts (ms, ${rounds.calls} calls each; /proc counts in 10 ms ticks; the bare proxy's in the control plane column):`);
  console.log(`    direct                            ${cpuLine(dc)}`);
  console.log(`    via the bare proxy                ${cpuLine(fc)}`);
  console.log(`    via control plane                 ${cpuLine(vc)}`);
  console.log(
    `    added by the control plane path   load generator ${ms(added(dc.loadGenerator, vc.loadGenerator))}   control plane ${ms(added(dc.controlPlane, vc.controlPlane))}   upstream peers ${ms(added(dc.upstreams, vc.upstreams))}   postgres ${ms(added(dc.postgres, vc.postgres))}`,
  );
  // What one core per server would carry: the busiest server of the path bounds it (the load
  // generator is not part of the system; PostgreSQL is, but takes no call's path here).
  const bound = (servers: (number | null)[]) => (servers.some((x) => x === null) ? null : Math.max(...(servers as number[])));
  const directBound = bound([dc.upstreams]);
  const viaBound = bound([vc.controlPlane, vc.upstreams]);
  if (directBound !== null && viaBound !== null && directBound > 0 && viaBound > 0) {
    const floorBound = bound([fc.controlPlane, fc.upstreams]);
    console.log(
      `  capacity with a core per server    direct ${(1000 / directBound).toFixed(0)} req/s (upstream bound)   via control plane ${(1000 / viaBound).toFixed(0)} req/s (${vc.controlPlane! >= vc.upstreams! ? 'control plane' : 'upstream'} bound)   ratio ${(directBound / viaBound).toFixed(2)}${floorBound ? `   (bare proxy ratio ${(directBound / floorBound).toFixed(2)})` : ''}`,
    );
  }
  console.log(`  tools/list, ${CONNECTIONS} × ${TOOLS} tools          ${fmt(l)}`);
  const c = latencies[4];
  const rc = rounds.results[3];
  if (c && rc) {
    console.log(`Compared build (${COMPARE}), in the same turns and bursts:`);
    console.log(
      `  tools/call via the compared build   ${fmt(c)}   added p50 ${(c.p50 - d.p50).toFixed(3)} ms against this build's ${(v.p50 - d.p50).toFixed(3)} ms`,
    );
    console.log(
      `  throughput                         ${rc.rate.toFixed(0)} req/s against this build's ${rv.rate.toFixed(0)} (ratio ${(rv.rate / rc.rate).toFixed(2)}); control plane CPU per call ${ms(rc.cpu.controlPlane)} against ${ms(rv.cpu.controlPlane)} ms`,
    );
  }
  // The goals are against the bare proxy, measured in the same turns and bursts: what any gateway adds here.
  const goals = [
    { name: 'added p50 latency ≤ 1.1× the bare proxy’s', ratio: (v.p50 - d.p50) / Math.max(f.p50 - d.p50, 0.001), need: 1.1, atLeast: false },
    { name: 'throughput ≥ 0.9× the bare proxy’s', ratio: rv.rate / rf.rate, need: 0.9, atLeast: true },
  ];
  console.log('Goals (tools/call via control plane against the bare proxy):');
  for (const g of goals) {
    const pass = g.atLeast ? g.ratio >= g.need : g.ratio <= g.need;
    console.log(`  ${g.name.padEnd(44)} ${g.ratio.toFixed(2).padStart(5)}×  (goal ${g.atLeast ? '≥' : '≤'} ${g.need})  ${pass ? 'PASS' : 'FAIL'}`);
  }

  await stopChild(floor);
  if (compared) await stopChild(compared.child);
  await stopChild(server.child);
  if (server.child.exitCode !== 0)
    console.log(`(the control plane exited with code ${server.child.exitCode} on SIGTERM: ${server.child.stderr.join('').slice(-500)})`);
  if (PROFILE_DIR)
    console.log(
      `CPU profiles (whole runs, seeding included) are in ${PROFILE_DIR}: the control plane's named by pid ${procs.controlPlane}, the bare proxy's by pid ${floor.process.pid}.`,
    );
  console.log(`Load average ${loads()} at the end.`);
}

void main()
  .then(
    () => 0,
    (err) => {
      // On Ctrl-C the children get the signal too, and the request in flight fails: not worth a stack.
      if (!interrupted()) process.stderr.write(`Benchmark failed: ${err instanceof Error ? err.stack : String(err)}\n`);
      return 1;
    },
  )
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  });
