// The upstream MCP server hangs (SIGSTOP: the kernel still accepts its connections, nothing
// answers) and then drops every connection (SIGKILL would lose its port; instead SIGCONT after
// the hang, and the replicas' pooled sessions must carry on). Holds when every `tools/call`
// made while it hangs answers a tool error (`isError`, HTTP 200) within the outbound deadline
// (OUTBOUND_TIMEOUT_MS, 10 s by default) plus a margin, never a 5xx; once it answers again the
// calls succeed (the pool recovers); and the replicas hold no more connections to the upstream
// afterwards than before, give or take the one a recovered session may open (no socket left
// behind per failed call: 3 hung calls per replica would leave 3). All descriptors are counted
// too, as a figure only: the pool to PgBouncer and kept-alive client sockets come and go.
//
// Figures: the calls' durations while hung against the deadline, the time from SIGCONT to the
// first successful call on every replica, connections to the upstream and descriptors per
// replica before and after.
import { execFileSync } from 'node:child_process';
import type { Scenario, ScenarioResult } from '../scenario';
import { postMcp } from '../load';
import { HOST, openFds } from '../../bench/processes';

const DEADLINE_MS = Number(process.env.SCALE_OUTBOUND_TIMEOUT_MS ?? 10_000);
const CALLS = Number(process.env.SCALE_HANG_CALLS ?? 9);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The pid listening on `port` of loopback (from `ss`), or null. */
function listenerPid(port: number): number | null {
  const out = execFileSync('ss', ['-Hltnp', `sport = :${port}`], { encoding: 'utf8' });
  const pid = /pid=(\d+)/.exec(out)?.[1];
  return pid ? Number(pid) : null;
}

/** Established TCP connections from process `pid` to loopback `port` (from `ss`). */
function connectionsTo(pid: number | undefined, port: number): number {
  if (!pid) return NaN;
  const out = execFileSync('ss', ['-Htnp', 'state', 'established', 'dst', `${HOST}:${port}`], { encoding: 'utf8' });
  return out.split('\n').filter((line) => line.includes(`pid=${pid},`)).length;
}

interface Call {
  status: number | null;
  isError: boolean | null;
  text: string;
  ms: number;
}

export const scenario: Scenario = {
  name: 'upstream-hang',
  order: 50,
  async run(cluster): Promise<ScenarioResult> {
    const { seed } = cluster;
    const upstreamPid = listenerPid(Number(new URL(cluster.upstreamUrl).port));
    if (!upstreamPid) return { held: false, figures: {}, notes: [`no process listens at ${cluster.upstreamUrl}`] };
    let rpcId = 0;
    const call = async (base: string): Promise<Call> => {
      const t0 = performance.now();
      try {
        const res = await postMcp(
          base,
          seed.mcpServerId,
          seed.mcpToken,
          { jsonrpc: '2.0', id: (rpcId += 1), method: 'tools/call', params: { name: seed.echoTool, arguments: { text: 'hang' } } },
          DEADLINE_MS * 3,
        );
        const text = await res.text();
        const isError = text.includes('"result"') ? text.includes('"isError":true') : null;
        return { status: res.status, isError, text: text.slice(0, 200), ms: performance.now() - t0 };
      } catch (err) {
        return { status: null, isError: null, text: String(err), ms: performance.now() - t0 };
      }
    };

    // Warm: every replica has its pooled session, then the descriptors they hold at rest.
    for (const r of cluster.replicas) for (let i = 0; i < 3; i += 1) await call(r.url);
    await sleep(500);
    const upstreamPort = Number(new URL(cluster.upstreamUrl).port);
    const fdsBefore = cluster.replicas.map((r) => openFds(r.child?.process.pid));
    const socketsBefore = cluster.replicas.map((r) => connectionsTo(r.child?.process.pid, upstreamPort));

    process.kill(upstreamPid, 'SIGSTOP');
    let hung: Call[];
    try {
      // Spread over the replicas, all at once.
      hung = await Promise.all(Array.from({ length: CALLS }, (_, i) => call(cluster.replicas[i % cluster.replicas.length]!.url)));
    } finally {
      process.kill(upstreamPid, 'SIGCONT');
    }
    const resumedAt = Date.now();
    const recovered: number[] = [];
    await Promise.all(
      cluster.replicas.map(async (r) => {
        while (Date.now() - resumedAt < 60_000) {
          const c = await call(r.url);
          if (c.status === 200 && c.isError === false) return void recovered.push(Date.now() - resumedAt);
          await sleep(100);
        }
      }),
    );
    // What the hung calls left behind has had time to close, and what recovery opened has been
    // idle longer than the upstream agent keeps an idle connection (4 s).
    await sleep(2_000);
    const socketsSoon = cluster.replicas.map((r) => connectionsTo(r.child?.process.pid, upstreamPort));
    await sleep(4_000);
    const fdsAfter = cluster.replicas.map((r) => openFds(r.child?.process.pid));
    const socketsAfter = cluster.replicas.map((r) => connectionsTo(r.child?.process.pid, upstreamPort));

    const margin = DEADLINE_MS + 3_000;
    const toolErrors = hung.filter((c) => c.status === 200 && c.isError === true);
    const slowest = Math.max(...hung.map((c) => c.ms));
    const leaked = socketsAfter.some((after, i) => !(after <= (socketsBefore[i] ?? 0) + 1));
    const held = toolErrors.length === hung.length && slowest <= margin && recovered.length === cluster.replicas.length && !leaked;
    const notes = hung.filter((c) => !(c.status === 200 && c.isError === true)).map((c) => `not a tool error: ${c.status} ${c.text}`);
    if (slowest > margin) notes.push(`slowest hung call ${slowest.toFixed(0)} ms, past the deadline ${DEADLINE_MS} ms + 3 s`);
    if (leaked) notes.push(`connections to the upstream grew: ${socketsBefore.join('/')} → ${socketsAfter.join('/')}`);
    notes.push(`first hung answer: ${hung[0]?.text ?? ''}`);
    const sorted = hung.map((c) => c.ms).sort((a, b) => a - b);
    return {
      held,
      figures: {
        'hung calls': hung.length,
        'tool errors': toolErrors.length,
        'duration ms min/max': `${sorted[0]?.toFixed(0)}/${slowest.toFixed(0)}`,
        'deadline ms': DEADLINE_MS,
        'recovery ms (per replica)': recovered
          .sort((a, b) => a - b)
          .map((ms) => ms.toFixed(0))
          .join('/'),
        'upstream connections before→2 s after→6 s after': `${socketsBefore.join('/')}→${socketsSoon.join('/')}→${socketsAfter.join('/')}`,
        'fds before→after': `${fdsBefore.join('/')}→${fdsAfter.join('/')}`,
      },
      notes,
    };
  },
};
