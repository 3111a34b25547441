// SIGTERM to one replica under the mixed load, with slow tool calls (the upstream's `sleep`,
// streamed as SSE) and ordinary requests in flight on it. What must hold:
// - the calls in flight on it finish (200 with their result), SSE streams included;
// - new requests go to the other replicas: the load through the balancer sees no error (idempotent
//   calls retried) and no cut POST or tools/call;
// - HAProxy sees its /ready answer 503 and marks it down; it exits with code 0;
// - the outbox hands its claims back: once it has exited, no delivery stays claimed and unsent
//   (waiting for its 60 s lease); every acknowledged write's event reaches the webhook.
// Figures: slow calls finished, time to exit, time until HAProxy marks it down, deliveries.
import { checkDeliveries, stuckClaims } from '../checks';
import type { Cluster } from '../cluster';
import { failureNotes, latencyFigures, postMcp } from '../load';
import type { Scenario } from '../scenario';

const SECONDS = 15;
const VICTIM = 2;
const SLOW_CALLS = 4;
const SLEEP_MS = 4_000;

/** A progress token asks the endpoint to stream the call (SSE) rather than answer it as JSON. */
async function slowCall(cluster: Cluster, base: string): Promise<{ ok: boolean; detail: string; sse: boolean }> {
  const { seed } = cluster;
  try {
    const res = await postMcp(
      base,
      seed.mcpServerId,
      seed.mcpToken,
      {
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: { name: seed.echoTool.replace(/__echo$/, '__sleep'), arguments: { ms: SLEEP_MS }, _meta: { progressToken: `slow-${Math.random()}` } },
      },
      30_000,
    );
    const text = await res.text();
    const sse = (res.headers.get('content-type') ?? '').includes('text/event-stream');
    return { ok: res.status === 200 && text.includes(`slept ${SLEEP_MS}`), detail: `${res.status} ${text.slice(0, 160)}`, sse };
  } catch (err) {
    return { ok: false, detail: err instanceof Error ? `${err.message} ${String(err.cause ?? '')}` : String(err), sse: false };
  }
}

export const scenario: Scenario = {
  name: 'graceful-shutdown',
  order: 40,
  async run(cluster, load) {
    const victim = cluster.replicas[VICTIM]!;
    const running = load.run({ durationMs: SECONDS * 1000, concurrency: 6 });
    await new Promise((r) => setTimeout(r, 3_000));
    // Straight to the victim, so that they are in flight there when it is told to stop.
    const slow = Array.from({ length: SLOW_CALLS }, () => slowCall(cluster, victim.url));
    await new Promise((r) => setTimeout(r, 1_000));
    const child = victim.child!;
    const stoppedAt = Date.now();
    child.process.kill('SIGTERM');
    let markedDownMs: number | null = null;
    let exitedMs: number | null = null;
    void child.exited.then(() => (exitedMs = Date.now() - stoppedAt));
    while (Date.now() - stoppedAt < 20_000 && markedDownMs === null) {
      const status = (await cluster.backendStatus())[`r${VICTIM}`] ?? '';
      if (status.startsWith('DOWN') || status.startsWith('NOLB') || status.startsWith('MAINT')) markedDownMs = Date.now() - stoppedAt;
      else await new Promise((r) => setTimeout(r, 50));
    }
    const slowResults = await Promise.all(slow);
    const result = await running;
    await Promise.race([child.exited, new Promise((r) => setTimeout(r, 15_000))]);
    const exitCode = child.exitCode;
    const stuck = await stuckClaims(cluster);
    const deliveries = await checkDeliveries(cluster, result.writes);
    await cluster.startReplica(VICTIM);
    const finished = slowResults.filter((s) => s.ok).length;
    const held =
      finished === SLOW_CALLS && result.errors === 0 && result.cut === 0 && exitCode === 0 && markedDownMs !== null && deliveries.missing === 0 && stuck === 0;
    return {
      held,
      figures: {
        'slow calls finished': `${finished}/${SLOW_CALLS}`,
        'streamed (SSE)': slowResults.filter((s) => s.sse).length,
        'exit code': exitCode === undefined ? 'still running' : String(exitCode),
        'exited after ms': exitedMs ?? 'n/a',
        'marked down after ms': markedDownMs ?? 'not within 20 s',
        'load errors': result.errors,
        'cut (POST/tools/call)': result.cut,
        'retried (idempotent)': result.retried,
        'claims left behind': stuck,
        delivered: `${deliveries.delivered}/${deliveries.expected}`,
        'deliveries waited ms': deliveries.waitedMs,
        ...latencyFigures(result),
      },
      notes: [
        ...slowResults.filter((s) => !s.ok).map((s) => `slow call: ${s.detail}`),
        ...failureNotes(result),
        ...(exitCode !== 0 ? [`victim stderr: ${child.stderr.join('').slice(-400)}`] : []),
      ],
    };
  },
};
