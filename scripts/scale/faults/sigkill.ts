// One replica killed with SIGKILL in the middle of the mixed load. What must hold:
// - no acknowledged write lost (each read back through the API) or half-written (each role of
//   the load in the database has its audit entry and its event, acknowledged or not);
// - outbox deliveries at least once with no gap: every acknowledged write's event reaches the
//   webhook (duplicates allowed and counted, missing ones not);
// - clients retrying idempotent calls (GET, DELETE) see no error; the calls that cannot be
//   retried (POST, tools/call) fail only as cut connections (gateway errors), counted.
// Figures: cut calls, retried calls, duplicates, time until HAProxy marks the replica down,
// delivery completeness. The replica is started again at the end.
import { checkDeliveries, checkWrites } from '../checks';
import { failureNotes, latencyFigures } from '../load';
import type { Scenario } from '../scenario';

const SECONDS = Number(process.env.SCALE_SIGKILL_SECONDS ?? 15);
const VICTIM = 1;

export const scenario: Scenario = {
  name: 'sigkill',
  order: 10,
  async run(cluster, load) {
    const running = load.run({ durationMs: SECONDS * 1000, concurrency: 8 });
    await new Promise((r) => setTimeout(r, (SECONDS * 1000) / 3));
    const killedAt = Date.now();
    await cluster.killReplica(VICTIM);
    let markedDownMs: number | null = null;
    while (Date.now() - killedAt < 20_000) {
      const status = (await cluster.backendStatus())[`r${VICTIM}`] ?? '';
      if (status.startsWith('DOWN')) {
        markedDownMs = Date.now() - killedAt;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const result = await running;
    const afterKill = result.outcomes.filter((o) => o.startedAt + o.ms >= killedAt);
    const idempotentErrors = result.outcomes.filter((o) => !o.ok && !o.cut);
    const writes = await checkWrites(cluster, load, result.writes);
    const deliveries = await checkDeliveries(cluster, result.writes);
    await cluster.startReplica(VICTIM);
    const held = idempotentErrors.length === 0 && writes.lost.length === 0 && writes.halfWritten.length === 0 && deliveries.missing === 0;
    return {
      held,
      figures: {
        requests: result.outcomes.length,
        'cut (POST/tools/call)': result.cut,
        'retried (idempotent)': result.retried,
        'errors after retry': idempotentErrors.length,
        'marked down after ms': markedDownMs ?? 'not within 20 s',
        'acked writes': result.writes.length,
        lost: writes.lost.length,
        'half-written': writes.halfWritten.length,
        delivered: `${deliveries.delivered}/${deliveries.expected}`,
        duplicates: deliveries.duplicates,
        'deliveries waited ms': deliveries.waitedMs,
        ...latencyFigures(result),
      },
      notes: [
        'deliveries a killed replica had claimed wait for their lease (60 s) to expire: "deliveries waited" shows it',
        `requests ending after the kill: ${afterKill.length}; of them failed ${afterKill.filter((o) => !o.ok).length}`,
        ...failureNotes(result),
        ...writes.lost.slice(0, 5).map((l) => `lost: ${l}`),
        ...writes.halfWritten.slice(0, 5).map((l) => `half-written: ${l}`),
      ],
    };
  },
};
