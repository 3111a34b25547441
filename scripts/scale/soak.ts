// The soak run (`run.ts --soak[=minutes]`, 30 by default): the mixed load at a steady,
// moderate rate (SCALE_SOAK_CONCURRENCY, default 4 in flight) for the given minutes, sampled
// every 30 s (SCALE_SOAK_SAMPLE_SECONDS): per replica its resident memory and heap in use (from
// its /metrics: prom-client's process metrics), open descriptors (/proc/<pid>/fd), its
// PostgreSQL pool (cp_db_pool_*), and PgBouncer's pools (SHOW POOLS on its admin console),
// with the load's rate, errors and p50/p99 in that window. Prints the table, writes it as CSV
// (the path is printed; kept after the run), and a verdict on flatness: the slope of memory
// and descriptors over the second half of the run against the first. The verdict is printed,
// not asserted: a loaded machine moves these figures. Holds when no request failed.
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openFds } from '../bench/processes';
import type { Cluster } from './cluster';
import type { Load } from './load';
import type { ScenarioResult } from './scenario';

const SAMPLE_MS = Number(process.env.SCALE_SOAK_SAMPLE_SECONDS ?? 30) * 1000;
const CONCURRENCY = Number(process.env.SCALE_SOAK_CONCURRENCY ?? 4);

interface Sample {
  minute: number;
  replica: number;
  rssMb: number;
  heapMb: number;
  fds: number;
  pool: number;
  poolIdle: number;
  poolWaiting: number;
  /** The window's load (the same for every replica of a window). */
  rps: number;
  errors: number;
  p50: number;
  p99: number;
  bouncerServers: number;
  load1: number;
}

/** One gauge's value from a Prometheus text scrape (the unlabelled series). */
function gauge(text: string, name: string): number {
  const match = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+|NaN)$`, 'm').exec(text);
  return match ? Number(match[1]) : NaN;
}

/** Server connections PgBouncer holds (active + idle + used + tested + login), from SHOW POOLS; NaN when its console does not answer. */
async function bouncerServers(url: string): Promise<number> {
  const admin = new URL(url);
  admin.pathname = '/pgbouncer';
  const client = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    // The admin console speaks the simple protocol only: a query without parameters is sent so.
    const { rows } = await client.query<Record<string, string>>('SHOW POOLS');
    return rows
      .filter((r) => r.database !== 'pgbouncer')
      .reduce((sum, r) => sum + ['sv_active', 'sv_idle', 'sv_used', 'sv_tested', 'sv_login'].reduce((s, k) => s + Number(r[k] ?? 0), 0), 0);
  } catch {
    return NaN;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Least-squares slope of y over x. */
function slope(points: [number, number][]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0);
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  return den === 0 ? 0 : num / den;
}

const fixed = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');

export async function soak(cluster: Cluster, load: Load, minutes: number): Promise<ScenarioResult> {
  const samples: Sample[] = [];
  const started = Date.now();
  const end = started + minutes * 60_000;
  let requests = 0;
  let failed = 0;
  const failures: string[] = [];
  console.log(`Soak: ${minutes} min of the mixed load, ${CONCURRENCY} in flight, sampled every ${SAMPLE_MS / 1000} s.`);
  console.log(['min', 'replica', 'RSS MB', 'heap MB', 'fds', 'pool', 'idle', 'wait', 'req/s', 'errors', 'p50 ms', 'p99 ms', 'bouncer sv', 'load1'].join('\t'));
  while (Date.now() < end) {
    const result = await load.run({ durationMs: Math.min(SAMPLE_MS, end - Date.now()), concurrency: CONCURRENCY });
    requests += result.outcomes.length;
    const bad = result.outcomes.filter((o) => !o.ok);
    failed += bad.length;
    for (const o of bad.slice(0, 3 - Math.min(3, failures.length))) failures.push(`${o.kind}: ${o.error ?? o.status}`);
    const times = result.outcomes.map((o) => o.ms).sort((a, b) => a - b);
    const pct = (p: number) => (times.length ? (times[Math.min(times.length - 1, Math.floor(p * times.length))] as number) : NaN);
    const minute = (Date.now() - started) / 60_000;
    const servers = await bouncerServers(cluster.bouncerUrl);
    for (const r of cluster.replicas) {
      const text = await fetch(`${r.metricsUrl}/metrics`, { signal: AbortSignal.timeout(5_000) })
        .then((res) => res.text())
        .catch(() => '');
      const sample: Sample = {
        minute,
        replica: r.index,
        rssMb: gauge(text, 'process_resident_memory_bytes') / 2 ** 20,
        heapMb: gauge(text, 'nodejs_heap_size_used_bytes') / 2 ** 20,
        fds: openFds(r.child?.process.pid),
        pool: gauge(text, 'cp_db_pool_connections'),
        poolIdle: gauge(text, 'cp_db_pool_idle_connections'),
        poolWaiting: gauge(text, 'cp_db_pool_waiting_clients'),
        rps: result.rate,
        errors: bad.length,
        p50: pct(0.5),
        p99: pct(0.99),
        bouncerServers: servers,
        load1: loadavg()[0] ?? NaN,
      };
      samples.push(sample);
      console.log(
        [
          fixed(sample.minute),
          `r${r.index}`,
          fixed(sample.rssMb),
          fixed(sample.heapMb),
          sample.fds,
          sample.pool,
          sample.poolIdle,
          sample.poolWaiting,
          fixed(sample.rps, 0),
          sample.errors,
          fixed(sample.p50),
          fixed(sample.p99),
          fixed(sample.bouncerServers, 0),
          fixed(sample.load1, 2),
        ].join('\t'),
      );
    }
  }

  const dir = join(tmpdir(), `cp-soak-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(dir, { recursive: true });
  const csv = join(dir, 'samples.csv');
  const columns = Object.keys(samples[0] ?? { minute: 0 }) as (keyof Sample)[];
  writeFileSync(csv, [columns.join(','), ...samples.map((s) => columns.map((c) => s[c]).join(','))].join('\n') + '\n');

  // Flatness: per replica, the slope (per minute) of RSS, heap and descriptors over each half.
  const half = minutes / 2;
  const verdicts: string[] = [];
  let grows = false;
  for (const r of cluster.replicas) {
    const mine = samples.filter((s) => s.replica === r.index);
    const parts = [mine.filter((s) => s.minute <= half), mine.filter((s) => s.minute > half)];
    const slopes = (key: 'rssMb' | 'heapMb' | 'fds') => parts.map((p) => slope(p.map((s) => [s.minute, s[key]] as [number, number])));
    const [rss1, rss2] = slopes('rssMb');
    const [heap1, heap2] = slopes('heapMb');
    const [fd1, fd2] = slopes('fds');
    // Growing: still climbing in the second half (more than 2 MB or half a descriptor a minute)
    // and higher there on average than in the first; a collection moves RSS by tens of MB, so a
    // slope alone over a few samples says little.
    const mean = (part: Sample[], key: 'rssMb' | 'fds') => part.reduce((sum, s) => sum + s[key], 0) / Math.max(1, part.length);
    const growing =
      ((rss2 ?? 0) > 2 && mean(parts[1]!, 'rssMb') > mean(parts[0]!, 'rssMb') * 1.05) ||
      ((fd2 ?? 0) > 0.5 && mean(parts[1]!, 'fds') > mean(parts[0]!, 'fds') + 2);
    grows ||= growing;
    // The floor (lowest sample) of each half: a leak raises it, a collector's sawtooth does not.
    const floor = (part: Sample[]) => Math.min(...part.map((s) => s.rssMb));
    const rate = (part: Sample[]) => part.reduce((sum, s) => sum + s.rps, 0) / Math.max(1, part.length);
    verdicts.push(
      `r${r.index}: RSS ${fixed(rss1 ?? NaN, 2)} → ${fixed(rss2 ?? NaN, 2)} MB/min (floor ${fixed(floor(parts[0]!))} → ${fixed(floor(parts[1]!))} MB), heap ${fixed(heap1 ?? NaN, 2)} → ${fixed(heap2 ?? NaN, 2)} MB/min, fds ${fixed(fd1 ?? NaN, 2)} → ${fixed(fd2 ?? NaN, 2)} /min, load ${fixed(rate(parts[0]!), 0)} → ${fixed(rate(parts[1]!), 0)} req/s (first half → second half): ${growing ? 'rising: read the floors and the rates' : 'flat'}`,
    );
  }
  if (minutes < 10) verdicts.push(`${minutes} min is short: a few samples per half, so the slopes are mostly the collector's noise; soak 30 min for a verdict`);
  const p99s = [...new Set(samples.map((s) => s.minute))].map((m) => samples.find((s) => s.minute === m)!.p99);
  return {
    held: failed === 0,
    figures: {
      minutes,
      requests,
      failed,
      'p99 ms first/last window': `${fixed(p99s[0] ?? NaN)}/${fixed(p99s[p99s.length - 1] ?? NaN)}`,
      verdict: grows ? 'memory or descriptors rising in the second half (see the notes)' : 'flat',
    },
    notes: [...verdicts, ...failures.map((f) => `failure: ${f}`), `samples: ${csv}`],
  };
}
