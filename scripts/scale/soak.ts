// The soak run (`run.ts --soak[=minutes]`): filled in below.
import type { Cluster } from './cluster';
import type { Load } from './load';
import type { ScenarioResult } from './scenario';

export async function soak(_cluster: Cluster, _load: Load, _minutes: number): Promise<ScenarioResult> {
  return { held: false, figures: {}, notes: ['not written yet'] };
}
