// `npx tsx scripts/scale/run.ts [name…] [--soak[=minutes]]` (`make scale`): starts the cluster
// of cluster.ts (three replicas behind HAProxy, PgBouncer, PostgreSQL, Redis, an upstream MCP
// server and a webhook receiver, all on loopback), runs every scenario of faults/ in order (or
// those named), and prints one line per scenario: its name, HELD or BROKEN, its figures.
// `--soak` instead runs the mixed load for the given minutes (30 by default) and prints the
// replicas' memory, descriptors, pool sizes and latency minute by minute.
//
// Bounded: each scenario has SCALE_SCENARIO_TIMEOUT_S (default 300 s); everything stops at the
// end, on failure and on Ctrl-C. Exit code 1 when a scenario did not hold (or failed).
import { readdirSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { cleanUpOnSignals, cleanup, interrupted } from '../bench/processes';
import { startCluster, type Cluster } from './cluster';
import { Load } from './load';
import type { Scenario, ScenarioResult } from './scenario';
import { soak } from './soak';

const TIMEOUT_MS = Number(process.env.SCALE_SCENARIO_TIMEOUT_S ?? 300) * 1000;

cleanUpOnSignals();

const loads = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

function loadScenarios(): Scenario[] {
  const dir = join(__dirname, 'faults');
  const found: Scenario[] = [];
  for (const file of readdirSync(dir).filter((f) => /\.ts$/.test(f) && !f.endsWith('.d.ts'))) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const mod = require(join(dir, file)) as { scenario?: Scenario; default?: Scenario };
    const scenario = mod.scenario ?? mod.default;
    if (!scenario) throw new Error(`faults/${file} exports no scenario`);
    found.push(scenario);
  }
  return found.sort((a, b) => (a.order ?? 50) - (b.order ?? 50) || a.name.localeCompare(b.name));
}

/** Every replica running and seen up by HAProxy again, whatever the last scenario left. */
async function heal(cluster: Cluster): Promise<void> {
  for (const r of cluster.replicas) if (!r.child || r.child.exitCode !== undefined) await cluster.startReplica(r.index);
  const deadline = Date.now() + 30_000;
  while (Object.values(await cluster.backendStatus()).filter((s) => s === 'UP').length < cluster.replicas.length) {
    if (Date.now() > deadline) throw new Error(`HAProxy does not see every replica up again: ${JSON.stringify(await cluster.backendStatus())}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000} s`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function line(name: string, result: ScenarioResult): string {
  const figures = Object.entries(result.figures)
    .map(([k, v]) => `${k}=${v}`)
    .join('  ');
  return `${name.padEnd(20)} ${result.held ? 'HELD  ' : 'BROKEN'}  ${figures}`;
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const soakArg = args.find((a) => a === '--soak' || a.startsWith('--soak='));
  const names = args.filter((a) => !a.startsWith('--'));
  console.log(`Scale run: ${new Date().toISOString()}, load average ${loads()} at start (2 cores here: every process shares them).`);

  let shared: Cluster | null = null;
  const sharedCluster = async () => (shared ??= await startCluster());

  if (soakArg) {
    const minutes = soakArg.includes('=') ? Number(soakArg.split('=')[1]) : 30;
    const cluster = await sharedCluster();
    const result = await soak(cluster, new Load(cluster), minutes);
    console.log(line('soak', result));
    for (const note of result.notes ?? []) console.log(`    ${note}`);
    console.log(`Load average ${loads()} at the end.`);
    return result.held ? 0 : 1;
  }

  const all = loadScenarios();
  const unknown = names.filter((n) => !all.some((s) => s.name === n));
  if (unknown.length > 0) throw new Error(`No scenario named ${unknown.join(', ')}; there are: ${all.map((s) => s.name).join(', ')}`);
  const chosen = names.length > 0 ? all.filter((s) => names.includes(s.name)) : all;
  let broken = 0;
  for (const scenario of chosen) {
    let result: ScenarioResult;
    let own: Cluster | null = null;
    try {
      const cluster = scenario.cluster ? (own = await startCluster(scenario.cluster)) : await sharedCluster();
      await heal(cluster);
      result = await within(scenario.run(cluster, new Load(cluster)), TIMEOUT_MS, scenario.name);
    } catch (err) {
      if (interrupted()) throw err;
      result = { held: false, figures: {}, notes: [`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`] };
    } finally {
      if (own) await own.stop();
    }
    if (!result.held) broken += 1;
    console.log(line(scenario.name, result));
    for (const note of result.notes ?? []) console.log(`    ${note}`);
  }
  console.log(`${chosen.length - broken} of ${chosen.length} held. Load average ${loads()} at the end.`);
  return broken === 0 ? 0 : 1;
}

void main()
  .then(
    (code) => code,
    (err) => {
      if (!interrupted()) process.stderr.write(`Scale run failed: ${err instanceof Error ? err.stack : String(err)}\n`);
      return 1;
    },
  )
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  });
