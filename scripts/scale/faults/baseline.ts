// No fault: the mixed load through the balancer, for the figures the faults are compared with.
// Holds when no request failed.
import { failureNotes, latencyFigures } from '../load';
import type { Scenario } from '../scenario';

const SECONDS = Number(process.env.SCALE_BASELINE_SECONDS ?? 20);

export const scenario: Scenario = {
  name: 'baseline',
  order: 0,
  async run(_cluster, load) {
    const result = await load.run({ durationMs: SECONDS * 1000, concurrency: 8 });
    return {
      held: result.errors === 0 && result.cut === 0,
      figures: { 'req/s': result.rate.toFixed(0), requests: result.outcomes.length, errors: result.errors + result.cut, ...latencyFigures(result) },
      notes: failureNotes(result),
    };
  },
};
