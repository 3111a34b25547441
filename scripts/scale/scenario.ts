// What a fault scenario is: scripts/scale/run.ts loads every file of faults/ and runs the
// scenario each exports (as `scenario`, or as its default export).
import type { Cluster, ClusterOptions } from './cluster';
import type { Load } from './load';

export interface ScenarioResult {
  /** Whether what the scenario promises held. */
  held: boolean;
  figures: Record<string, string | number>;
  notes?: string[];
}

export interface Scenario {
  name: string;
  /** Lower runs first (default 50); ties by name. */
  order?: number;
  /**
   * A cluster of its own, started with these options (a small rate limit, say), instead of the
   * one the other scenarios share.
   */
  cluster?: ClusterOptions;
  run(cluster: Cluster, load: Load): Promise<ScenarioResult>;
}
