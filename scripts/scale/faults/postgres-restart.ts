// PostgreSQL stopped and started under the mixed load. Holds when: while it is away each
// replica answers 503 with Retry-After (never a 500, never a hang past the probe's deadline),
// its readiness is 503 and its liveness 200; once it is back every replica serves again without
// a restart; and no acknowledged write is lost (every role the load saw created exists, every
// one it saw deleted does not).
//
// Figures: what the replicas answered while it was away (503 with Retry-After, other), what the
// clients behind HAProxy saw, the slowest answer during the outage, the time from PostgreSQL
// accepting connections again to every replica answering 200 (and to HAProxy seeing them up).
import { latencyFigures } from '../load';
import type { Scenario } from '../scenario';

const OUTAGE_MS = Number(process.env.SCALE_PG_OUTAGE_SECONDS ?? 8) * 1000;
const PROBE_DEADLINE_MS = 30_000;

interface Probe {
  status: number | null;
  retryAfter: string | null;
  ms: number;
}

async function probe(url: string, headers: Record<string, string>): Promise<Probe> {
  const t0 = performance.now();
  try {
    const res = await fetch(url, { headers, signal: AbortSignal.timeout(PROBE_DEADLINE_MS) });
    await res.arrayBuffer();
    return { status: res.status, retryAfter: res.headers.get('retry-after'), ms: performance.now() - t0 };
  } catch {
    return { status: null, retryAfter: null, ms: performance.now() - t0 };
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const scenario: Scenario = {
  name: 'postgres-restart',
  order: 30,
  async run(cluster, load) {
    const headers = cluster.headers;
    const loading = load.run({ durationMs: 5_000 + OUTAGE_MS + 25_000, concurrency: 4 });
    await sleep(5_000);

    await cluster.stopPostgres();
    const stoppedAt = Date.now();
    const direct: Probe[] = [];
    const ready: Probe[] = [];
    const health: Probe[] = [];
    const viaLb: Probe[] = [];
    while (Date.now() - stoppedAt < OUTAGE_MS) {
      const rounds = cluster.replicas.map(async (r) => {
        direct.push(await probe(`${r.url}/user/me`, headers));
        ready.push(await probe(`${r.metricsUrl}/ready`, {}));
        health.push(await probe(`${r.url}/health`, {}));
      });
      viaLb.push(await probe(`${cluster.lbUrl}/user/me`, headers));
      await Promise.all(rounds);
      await sleep(250);
    }

    await cluster.startPostgres();
    const startedAt = Date.now();
    const recovered: number[] = [];
    await Promise.all(
      cluster.replicas.map(async (r) => {
        while (Date.now() - startedAt < 60_000) {
          const p = await probe(`${r.url}/user/me`, headers);
          if (p.status === 200) return void recovered.push(Date.now() - startedAt);
          await sleep(100);
        }
      }),
    );
    let lbUpMs: number | null = null;
    while (Date.now() - startedAt < 60_000) {
      const up = Object.values(await cluster.backendStatus()).filter((s) => s === 'UP').length;
      if (up === cluster.replicas.length) {
        lbUpMs = Date.now() - startedAt;
        break;
      }
      await sleep(100);
    }
    const result = await loading;

    // Every acknowledged write is there (or gone, for a delete), read from PostgreSQL itself.
    const created = result.writes.filter((w) => w.kind === 'created').map((w) => w.roleId);
    const deleted = new Set(result.writes.filter((w) => w.kind === 'deleted').map((w) => w.roleId));
    const present = new Set(
      (await cluster.query<{ id: string }>('select id from roles where id = any($1::text[])', [[...created, ...deleted]])).map((row) => row.id),
    );
    const lostCreates = created.filter((id) => !deleted.has(id) && !present.has(id)).length;
    const undeleted = [...deleted].filter((id) => present.has(id)).length;

    const unavailable = direct.filter((p) => p.status === 503 && Number(p.retryAfter) >= 1).length;
    const otherDirect = direct.filter((p) => !(p.status === 503 && Number(p.retryAfter) >= 1));
    const lbCounts: Record<string, number> = {};
    for (const p of viaLb) {
      const key = p.status === null ? 'none' : p.status === 503 ? (p.retryAfter ? '503+RA' : '503') : String(p.status);
      lbCounts[key] = (lbCounts[key] ?? 0) + 1;
    }
    const slowest = Math.max(...direct.map((p) => p.ms));
    const held =
      direct.length > 0 &&
      otherDirect.length === 0 &&
      ready.every((p) => p.status === 503) &&
      health.every((p) => p.status === 200) &&
      recovered.length === cluster.replicas.length &&
      lbUpMs !== null &&
      lostCreates === 0 &&
      undeleted === 0;
    const notes: string[] = [];
    if (otherDirect.length > 0) notes.push(`replicas answered otherwise while it was away: ${JSON.stringify(otherDirect.slice(0, 5))}`);
    if (!ready.every((p) => p.status === 503)) notes.push(`/ready answered ${[...new Set(ready.map((p) => p.status))].join(', ')}`);
    if (!health.every((p) => p.status === 200)) notes.push(`/health answered ${[...new Set(health.map((p) => p.status))].join(', ')}`);
    const failures = result.outcomes.filter((o) => !o.ok);
    notes.push(
      `load during the whole run: ${result.outcomes.length} requests, ${failures.length} not ok (${result.retried} retried): ${JSON.stringify(
        Object.fromEntries(['read', 'list', 'create', 'delete', 'mcp'].map((k) => [k, failures.filter((f) => f.kind === k).length])),
      )}; statuses of failures ${JSON.stringify(countBy(failures.map((f) => String(f.status))))}`,
    );
    notes.push(`load latency: ${JSON.stringify(latencyFigures(result))}`);
    const slowest3 = [...result.outcomes].sort((a, b) => b.ms - a.ms).slice(0, 3);
    notes.push(
      `slowest load requests: ${slowest3
        .map(
          (o) =>
            `${o.kind} ${o.status} ${o.ms.toFixed(0)} ms, started ${((o.startedAt - stoppedAt) / 1000).toFixed(1)} s after the stop${o.error ? ` (${o.error.slice(0, 80)})` : ''}`,
        )
        .join('; ')}`,
    );
    return {
      held,
      figures: {
        'outage s': (OUTAGE_MS / 1000).toFixed(0),
        'replica 503+Retry-After': `${unavailable}/${direct.length}`,
        'slowest answer while away ms': slowest.toFixed(0),
        'via LB': JSON.stringify(lbCounts),
        'recovery ms (per replica)': recovered
          .sort((a, b) => a - b)
          .map((ms) => ms.toFixed(0))
          .join('/'),
        'LB all up ms': lbUpMs ?? 'never',
        'acked writes': result.writes.length,
        'lost acked writes': lostCreates + undeleted,
      },
      notes,
    };
  },
};

function countBy(values: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[v] = (out[v] ?? 0) + 1;
  return out;
}
