// Redis (the shared rate-limit counters) stopped and started under the mixed load. Holds when
// the API stays up: no request fails while Redis is away (the replicas count in process, as
// the README says, with the same budget per replica), no request waits on Redis (the p99
// while it is away stays within a few times the p99 before), and once Redis is back the
// replicas count there again.
//
// Figures: requests and errors before / while away / after, p99 of each phase, and the time
// from Redis accepting connections to a replica's counter appearing in it (it restarts empty:
// nothing is saved).
import { Redis } from 'ioredis';
import { summarize, type LoadResult } from '../load';
import type { Scenario } from '../scenario';

const PHASE_MS = Number(process.env.SCALE_REDIS_PHASE_SECONDS ?? 8) * 1000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function phase(result: LoadResult, from: number, to: number) {
  const outcomes = result.outcomes.filter((o) => o.startedAt >= from && o.startedAt < to);
  return summarize(outcomes, [], (to - from) / 1000);
}

const p99 = (r: LoadResult) => {
  const times = r.outcomes.map((o) => o.ms).sort((a, b) => a - b);
  return times.length ? (times[Math.min(times.length - 1, Math.floor(0.99 * times.length))] as number) : NaN;
};

export const scenario: Scenario = {
  name: 'redis-stop',
  order: 40,
  async run(cluster, load) {
    const t0 = Date.now();
    const loading = load.run({ durationMs: PHASE_MS * 3 + 2_000, concurrency: 4 });
    await sleep(PHASE_MS);
    await cluster.stopRedis();
    const stoppedAt = Date.now();
    await sleep(PHASE_MS);
    await cluster.startRedis();
    const startedAt = Date.now();
    const redis = new Redis(cluster.redisUrl, { maxRetriesPerRequest: 1 });
    let sharedAgainMs: number | null = null;
    try {
      while (Date.now() - startedAt < 30_000) {
        if ((await redis.dbsize().catch(() => 0)) > 0) {
          sharedAgainMs = Date.now() - startedAt;
          break;
        }
        await sleep(50);
      }
    } finally {
      redis.disconnect();
    }
    const result = await loading;
    const before = phase(result, t0, stoppedAt);
    const away = phase(result, stoppedAt, startedAt);
    const after = phase(result, startedAt, Date.now());
    const refused = result.outcomes.filter((o) => o.status === 429).length;
    const errors = result.outcomes.filter((o) => !o.ok).length;
    // "Waits on Redis" would show as the outage's p99 far above the others'; a loaded machine
    // moves p99 a lot, so only an order of magnitude counts.
    const waited = p99(away) > 10 * Math.max(p99(before), 50);
    const held = errors === 0 && sharedAgainMs !== null && !waited;
    const notes = result.outcomes
      .filter((o) => !o.ok)
      .slice(0, 5)
      .map((o) => `${o.kind} failed: ${o.error ?? o.status}`);
    if (waited) notes.push(`p99 while away ${p99(away).toFixed(0)} ms against ${p99(before).toFixed(0)} ms before: something waited on Redis`);
    notes.push('refusals while away are counted per replica (in process): the budget per credential is then up to N× the shared one');
    return {
      held,
      figures: {
        'requests before/away/after': `${before.outcomes.length}/${away.outcomes.length}/${after.outcomes.length}`,
        errors,
        '429': refused,
        'p99 ms before/away/after': `${p99(before).toFixed(0)}/${p99(away).toFixed(0)}/${p99(after).toFixed(0)}`,
        'counted in Redis again after ms': sharedAgainMs ?? 'never',
      },
      notes,
    };
  },
};
