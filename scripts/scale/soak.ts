// The soak run (`run.ts --soak[=minutes]`, 30 by default): the mixed load through the balancer
// for that long, in ten equal slices; after each, every replica's resident memory and open
// descriptors (/proc), its pool (cp_db_pool_connections and cp_db_pool_waiting_clients from its
// /metrics) and the slice's latency. The notes are the curves, a line per slice.
//
// Holds when no request failed and, from the first slice (warm) to the last, no replica's memory
// grew by more than half, its descriptors by more than 20 (+20 %), and the p99 by more than 3×:
// loose bounds, as two loaded cores make every figure noisy; the curves say more.
import { readFileSync, readdirSync } from 'node:fs';
import type { Cluster } from './cluster';
import { percentile, type Load } from './load';
import type { ScenarioResult } from './scenario';

interface Sample {
  rssMb: number[];
  fds: number[];
  pool: string[];
  p50: number;
  p99: number;
  rate: number;
  errors: number;
}

function rssMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kb ?? 0) / 1024;
}

async function pool(metricsUrl: string): Promise<string> {
  const text = await fetch(`${metricsUrl}/metrics`, { signal: AbortSignal.timeout(5_000) })
    .then((r) => r.text())
    .catch(() => '');
  const value = (name: string) => new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? '?';
  return `${value('cp_db_pool_connections')}/${value('cp_db_pool_waiting_clients')}`;
}

export async function soak(cluster: Cluster, load: Load, minutes: number): Promise<ScenarioResult> {
  const sliceMs = Math.max(5_000, (minutes * 60_000) / 10);
  const slices = Math.max(1, Math.round((minutes * 60_000) / sliceMs));
  const samples: Sample[] = [];
  for (let i = 0; i < slices; i += 1) {
    const result = await load.run({ durationMs: sliceMs, concurrency: 6 });
    const times = result.outcomes.map((o) => o.ms).sort((a, b) => a - b);
    const pids = cluster.replicas.map((r) => r.child?.process.pid ?? 0);
    samples.push({
      rssMb: pids.map(rssMb),
      fds: pids.map((pid) => readdirSync(`/proc/${pid}/fd`).length),
      pool: await Promise.all(cluster.replicas.map((r) => pool(r.metricsUrl))),
      p50: percentile(times, 50),
      p99: percentile(times, 99),
      rate: result.rate,
      errors: result.errors + result.cut,
    });
  }
  const first = samples[0]!;
  const last = samples[samples.length - 1]!;
  const grew = cluster.replicas.map((_, r) => ({
    memory: last.rssMb[r]! / first.rssMb[r]!,
    fds: last.fds[r]! - first.fds[r]!,
    fdBound: 20 + first.fds[r]! * 0.2,
  }));
  const errors = samples.reduce((sum, s) => sum + s.errors, 0);
  const held = errors === 0 && grew.every((g) => g.memory <= 1.5 && g.fds <= g.fdBound) && last.p99 <= 3 * first.p99;
  return {
    held,
    figures: {
      minutes,
      errors,
      'rss MB first→last': cluster.replicas.map((_, r) => `${first.rssMb[r]!.toFixed(0)}→${last.rssMb[r]!.toFixed(0)}`).join(' '),
      'fds first→last': cluster.replicas.map((_, r) => `${first.fds[r]}→${last.fds[r]}`).join(' '),
      'p99 ms first→last': `${first.p99.toFixed(0)}→${last.p99.toFixed(0)}`,
    },
    notes: [
      'slice  req/s  p50 ms  p99 ms  errors  rss MB per replica  fds per replica  pool open/waiting per replica',
      ...samples.map(
        (s, i) =>
          `${String(i + 1).padStart(5)}  ${s.rate.toFixed(0).padStart(5)}  ${s.p50.toFixed(1).padStart(6)}  ${s.p99.toFixed(1).padStart(6)}  ${String(s.errors).padStart(6)}  ${s.rssMb.map((m) => m.toFixed(0)).join('/')}  ${s.fds.join('/')}  ${s.pool.join(' ')}`,
      ),
    ],
  };
}
