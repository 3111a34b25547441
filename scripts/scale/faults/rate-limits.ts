// Rate limits held across replicas: a credential's budget (RATE_LIMIT_REQUESTS per
// RATE_LIMIT_WINDOW_SECONDS) is shared through Redis, so requests spread over the three replicas
// (each asked directly, in turn) are accepted about `budget` times in the window, not three times
// that. A cluster of its own with a small budget, and a token of its own (made by the CLI) so
// that nothing else spends it. Holds when accepted/budget is within 0.95–1.0 and every other
// answer is 429 with Retry-After.
import type { Scenario } from '../scenario';

const BUDGET = 300;
const WINDOW_SECONDS = 120;

export const scenario: Scenario = {
  name: 'rate-limits',
  order: 30,
  cluster: { env: { RATE_LIMIT_REQUESTS: String(BUDGET), RATE_LIMIT_WINDOW_SECONDS: String(WINDOW_SECONDS) } },
  async run(cluster) {
    const { seed } = cluster;
    const minted = (await cluster.cli(['token', 'create', '--org', seed.orgId, '--user', seed.userId, '--name', 'rate limits'])) as { api_token: string };
    const total = BUDGET * 3;
    const counts = { accepted: 0, refused: 0, refusedWithoutRetryAfter: 0, other: 0 };
    const perReplica = cluster.replicas.map(() => 0);
    let next = 0;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        while (next < total) {
          const i = next % cluster.replicas.length;
          next += 1;
          const res = await fetch(`${cluster.replicas[i]!.url}/user/me`, {
            headers: { authorization: `Bearer ${minted.api_token}` },
            signal: AbortSignal.timeout(10_000),
          });
          await res.arrayBuffer();
          if (res.status === 200) {
            counts.accepted += 1;
            perReplica[i]! += 1;
          } else if (res.status === 429) {
            counts.refused += 1;
            if (!res.headers.get('retry-after')) counts.refusedWithoutRetryAfter += 1;
          } else counts.other += 1;
        }
      }),
    );
    const seconds = (Date.now() - started) / 1000;
    const ratio = counts.accepted / BUDGET;
    return {
      held: ratio <= 1 && ratio >= 0.95 && counts.other === 0 && counts.refusedWithoutRetryAfter === 0 && seconds < WINDOW_SECONDS,
      figures: {
        'accepted/budget': ratio.toFixed(3),
        accepted: counts.accepted,
        budget: BUDGET,
        refused: counts.refused,
        'accepted per replica': perReplica.join('/'),
        sent: total,
        seconds: seconds.toFixed(1),
      },
      notes:
        counts.other > 0 || counts.refusedWithoutRetryAfter > 0
          ? [`other answers ${counts.other}; 429 without Retry-After ${counts.refusedWithoutRetryAfter}`]
          : [],
    };
  },
};
