// `npx tsx scripts/bench/tracing.ts`: what tracing costs the MCP endpoint's `tools/call`, the
// hottest path that creates spans (three per call: the HTTP request's, the MCP message's, the
// upstream call's). Runs scripts/bench/mcp-endpoint.ts (a process per role, PostgreSQL at
// BENCH_DATABASE_URL) twice, in turns: tracing off (no OTEL_* variable: no span is created and
// nothing is propagated), then on, exporting every span over OTLP/HTTP to a sink on loopback
// in this process that decodes and counts them as a collector would. Prints each run's lines
// and the ratios of the control plane's added p50 latency and of its throughput, on / off.
//
// Bounded: BENCH_COUNT calls per target and run (default 500, at most 5000), BENCH_ROUNDS
// pairs of runs (default 1, at most 3).
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './processes';

const COUNT = Math.min(5000, Math.max(10, Number(process.env.BENCH_COUNT ?? 500)));
const ROUNDS = Math.min(3, Math.max(1, Number(process.env.BENCH_ROUNDS ?? 1)));

/** A collector that takes everything: decodes each export and counts its spans. */
async function startSink() {
  let spans = 0;
  let exports = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      exports += 1;
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceSpans?: { scopeSpans?: { spans?: unknown[] }[] }[] };
        for (const rs of body.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans += ss.spans?.length ?? 0;
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts: () => ({ spans, exports }),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

interface Run {
  addedP50: number;
  viaRate: number;
  directRate: number;
  lines: string[];
}

function runBench(env: Record<string, string>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts/bench/mcp-endpoint.ts')], {
      cwd: ROOT,
      env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_'))), BENCH_COUNT: String(COUNT), ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const lines = out.split('\n').filter((l) => l.includes('tools/call via') || l.includes('throughput at') || l.includes('via control plane  '));
      const added = /tools\/call via control plane.*added p50 (-?[\d.]+) ms/.exec(out);
      const rates = /direct (\d+) req\/s\s+via control plane (\d+) req\/s/.exec(out);
      if (code !== 0 || !added || !rates) return reject(new Error(`mcp-endpoint.ts exited with ${code}:\n${out.slice(-2000)}`));
      resolve({ addedP50: Number(added[1]), directRate: Number(rates[1]), viaRate: Number(rates[2]), lines });
    });
  });
}

async function main(): Promise<void> {
  const sink = await startSink();
  console.log(
    `Tracing cost on tools/call, ${COUNT} calls per target, ${ROUNDS} round(s); load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} at start`,
  );
  const off: Run[] = [];
  const on: Run[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      off.push(await runBench({}));
      console.log(`off #${round + 1}:\n${off[round]!.lines.join('\n')}`);
      const before = sink.counts();
      on.push(await runBench({ OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_SERVICE_NAME: 'cp-bench' }));
      const after = sink.counts();
      console.log(
        `on #${round + 1} (${after.spans - before.spans} spans received in ${after.exports - before.exports} exports):\n${on[round]!.lines.join('\n')}`,
      );
    }
  } finally {
    await sink.close();
  }
  const mean = (runs: Run[], pick: (r: Run) => number) => runs.reduce((sum, r) => sum + pick(r), 0) / runs.length;
  const addedOff = mean(off, (r) => r.addedP50);
  const addedOn = mean(on, (r) => r.addedP50);
  // Throughput relative to the direct calls of the same run, so that a machine whose load drifts between runs skews both alike.
  const shareOff = mean(off, (r) => r.viaRate / r.directRate);
  const shareOn = mean(on, (r) => r.viaRate / r.directRate);
  console.log(
    `added p50: off ${addedOff.toFixed(2)} ms, on ${addedOn.toFixed(2)} ms (ratio ${(addedOn / addedOff).toFixed(2)}); throughput / direct: off ${shareOff.toFixed(2)}, on ${shareOn.toFixed(2)} (ratio ${(shareOn / shareOff).toFixed(2)})`,
  );
  console.log(
    `Load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} at the end.`,
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
