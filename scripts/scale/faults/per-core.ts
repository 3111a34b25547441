// No fault: the hot paths' throughput per core with three replicas behind HAProxy, against one
// replica called directly and against the floors make bench and make bench-mcp compare with (a
// bare Express hello world; a bare Express proxy in front of the same upstream). Every target is
// first warmed for 5 s, then each is saturated with autocannon for SCALE_PER_CORE_SECONDS
// (default 10) and its rate divided by the cores the serving processes used meanwhile (/proc:
// the three replicas through the balancer, the one replica direct, the hello world, the proxy):
// requests per second of CPU the serving processes got, whatever else ran beside them. Holds
// when no request failed; the ratios are printed beside the goals they are measured against,
// not asserted: where two cores serve the balancer, PgBouncer, PostgreSQL, the load generator
// and three replicas, each request costs more CPU through contention alone (the README's
// figures: bare hello-world servers lose a quarter per core behind the same HAProxy).
import autocannon from 'autocannon';
import { cpuMs, firstLine, freePort, HOST, startChild, stopChild, tsxArgs, waitUntilUp } from '../../bench/processes';
import { createBenchDestination } from '../../bench/support';
import { mcpHeaders } from '../load';
import type { Scenario } from '../scenario';

const SECONDS = Number(process.env.SCALE_PER_CORE_SECONDS ?? 10);

interface Measured {
  target: string;
  rps: number;
  /** Cores the serving processes kept busy on average. */
  cores: number;
  perCore: number;
  p50: number;
  p99: number;
  failed: number;
}

type Request = { method?: 'GET' | 'POST'; headers?: Record<string, string>; body?: string };

interface Target {
  name: string;
  /** Saturated at once, `connections` split between them. */
  urls: string[];
  request: Request;
  connections: number;
  /** The processes that serve it, whose cores divide its rate. */
  pids: number[];
}

const WARM_UP_SECONDS = 5;

/** Saturates the target for `duration` seconds. */
function saturate({ urls, connections, request }: Target, duration: number) {
  return Promise.all(
    urls.map((url) =>
      autocannon({
        url,
        connections: Math.ceil(connections / urls.length),
        timeout: 10,
        method: request.method ?? 'GET',
        headers: request.headers,
        body: request.body,
        duration,
      }),
    ),
  );
}

/** The target's rate divided by the cores its processes used meanwhile. */
async function measure(target: Target): Promise<Measured> {
  const { name, pids } = target;
  const cpu = () => pids.reduce((sum, pid) => sum + (cpuMs(pid) ?? Number.NaN), 0);
  const before = cpu();
  const started = performance.now();
  const results = await saturate(target, SECONDS);
  const seconds = (performance.now() - started) / 1000;
  const cores = (cpu() - before) / 1000 / seconds;
  const total = (pick: (r: autocannon.Result) => number) => results.reduce((sum, r) => sum + pick(r), 0);
  const result = {
    requests: { total: total((r) => r.requests.total) },
    latency: results[0]!.latency,
    errors: total((r) => r.errors),
    timeouts: total((r) => r.timeouts),
    non2xx: total((r) => r.non2xx),
  };
  const rps = result.requests.total / seconds;
  return {
    target: name,
    rps,
    cores,
    perCore: rps / cores,
    p50: result.latency.p50,
    p99: result.latency.p99,
    failed: result.errors + result.timeouts + result.non2xx,
  };
}

export const scenario: Scenario = {
  name: 'per-core',
  order: 1,
  async run(cluster) {
    const replicaPids = cluster.replicas.map((r) => r.child?.process.pid).filter((pid): pid is number => pid !== undefined);
    const direct = cluster.replicas[0]!;
    const destinationId = await createBenchDestination(cluster.lbUrl, cluster.headers, `per-core-${Date.now()}`);
    const read: Request = { headers: cluster.headers };
    const call = (tool: string) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: tool, arguments: { text: 'hi' } } });
    const mcp: Request = { method: 'POST', headers: mcpHeaders(cluster.seed.mcpToken), body: call(cluster.seed.echoTool) };

    const helloPort = await freePort();
    const hello = startChild('hello-express', tsxArgs('scripts/bench/hello-express.ts'), { PORT: String(helloPort), NODE_ENV: 'production' });
    const proxyPort = await freePort();
    const proxy = startChild(
      'the bare proxy',
      tsxArgs('scripts/bench/bare-proxy.ts'),
      { PORT: String(proxyPort), NODE_ENV: 'production', UPSTREAM_URL: cluster.upstreamUrl, UPSTREAM_KEY: cluster.upstreamKey },
      'pipe',
    );
    const rows: Measured[] = [];
    try {
      await waitUntilUp(hello, `http://${HOST}:${helloPort}/`);
      await firstLine(proxy);
      const readPath = `/notification-destination/${destinationId}`;
      const mcpPath = `/mcp/${cluster.seed.mcpServerId}`;
      const replicaPid = direct.child!.process.pid!;
      const targets: Target[] = [
        { name: 'hello world (bare Express)', urls: [`http://${HOST}:${helloPort}/`], request: {}, connections: 50, pids: [hello.process.pid!] },
        { name: 'read, 3 replicas via HAProxy', urls: [`${cluster.lbUrl}${readPath}`], request: read, connections: 50, pids: replicaPids },
        { name: 'read, 1 replica direct', urls: [`${direct.url}${readPath}`], request: read, connections: 50, pids: [replicaPid] },
        {
          name: 'read, 3 replicas direct at once',
          urls: cluster.replicas.map((r) => `${r.url}${readPath}`),
          request: read,
          connections: 51,
          pids: replicaPids,
        },
        {
          name: 'tools/call, bare proxy',
          urls: [`http://${HOST}:${proxyPort}/mcp`],
          request: { ...mcp, body: call('echo'), headers: mcpHeaders('none') },
          connections: 16,
          pids: [proxy.process.pid!],
        },
        { name: 'tools/call, 3 replicas via HAProxy', urls: [`${cluster.lbUrl}${mcpPath}`], request: mcp, connections: 16, pids: replicaPids },
        { name: 'tools/call, 1 replica direct', urls: [`${direct.url}${mcpPath}`], request: mcp, connections: 16, pids: [replicaPid] },
      ];
      // Every path of every process compiled by V8's optimizing tier before anything is measured:
      // a replica's first seconds of a path cost it twice the CPU per request.
      for (const target of targets) await saturate(target, WARM_UP_SECONDS);
      for (const target of targets) rows.push(await measure(target));
    } finally {
      await Promise.all([stopChild(hello), stopChild(proxy)]);
    }
    const [helloRow, readLb, readDirect, , proxyRow, mcpLb, mcpDirect] = rows as Measured[] as [
      Measured,
      Measured,
      Measured,
      Measured,
      Measured,
      Measured,
      Measured,
    ];
    const ratio = (a: Measured, b: Measured) => (a.perCore / b.perCore).toFixed(2);
    const figures: Record<string, string | number> = {};
    for (const row of rows) {
      figures[row.target] = `${row.rps.toFixed(0)} req/s on ${row.cores.toFixed(2)} cores = ${row.perCore.toFixed(0)}/core, p50/p99 ${row.p50}/${row.p99} ms`;
    }
    figures['read per core ÷ hello world per core (make bench goal ≥ 0.5)'] = ratio(readLb, helloRow);
    figures['tools/call per core ÷ bare proxy per core (make bench-mcp goal ≥ 0.9)'] = ratio(mcpLb, proxyRow);
    figures['read per core: via HAProxy ÷ one replica (scaling out, ideally 1)'] = ratio(readLb, readDirect);
    figures['tools/call per core: via HAProxy ÷ one replica (ideally 1)'] = ratio(mcpLb, mcpDirect);
    const failed = rows.reduce((sum, row) => sum + row.failed, 0);
    return {
      held: failed === 0,
      figures: { ...figures, failed },
      notes: rows.filter((r) => r.failed > 0).map((r) => `${r.target}: ${r.failed} requests failed`),
    };
  },
};
