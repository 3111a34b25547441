// A revoked API token, and an MCP server's rotated token, refused on every replica.
//
// The promise (README, CREDENTIAL_CACHE_SECONDS): a replica may remember what a credential may do
// for up to 60 s, but a change to it clears the memory at once on the replica that made it and,
// through PostgreSQL LISTEN/NOTIFY, "within a moment" on every other. Stated here as: refused on
// every replica within SCALE_REVOCATION_PROMISE_MS (default 1000 ms) of the change's
// acknowledgement.
//
// Each credential is first used on every replica directly (so each remembers it), then revoked
// (an UPDATE on the database: the API refuses API tokens this) or rotated (through the balancer), and every replica is asked directly, over and over, until it
// refuses: the figure is the slowest replica's time, over ROUNDS rounds.
import type { Cluster } from '../cluster';
import type { Scenario } from '../scenario';
import { postMcp } from '../load';

const PROMISE_MS = Number(process.env.SCALE_REVOCATION_PROMISE_MS ?? 1000);
const ROUNDS = 3;
const GIVE_UP_MS = 20_000;

/** Asks every replica directly until each answers 401; ms from `since` per replica (null: never within GIVE_UP_MS). */
async function untilRefusedEverywhere(cluster: Cluster, since: number, ask: (base: string) => Promise<number>): Promise<(number | null)[]> {
  return Promise.all(
    cluster.replicas.map(async (r) => {
      while (Date.now() - since < GIVE_UP_MS) {
        const status = await ask(r.url).catch(() => 0);
        if (status === 401) return Date.now() - since;
        await new Promise((done) => setTimeout(done, 5));
      }
      return null;
    }),
  );
}

async function everyReplicaAccepts(cluster: Cluster, ask: (base: string) => Promise<number>): Promise<void> {
  for (const r of cluster.replicas) {
    const status = await ask(r.url);
    if (status !== 200) throw new Error(`replica ${r.index} answered ${status} before the change`);
  }
}

export const scenario: Scenario = {
  name: 'revocation',
  order: 20,
  async run(cluster) {
    const { seed, headers } = cluster;
    const tokenTimes: (number | null)[] = [];
    const mcpTimes: (number | null)[] = [];
    for (let round = 0; round < ROUNDS; round += 1) {
      // An API token of its own, made by the operator CLI (the API mints tokens for people only).
      const minted = (await cluster.cli(['token', 'create', '--org', seed.orgId, '--user', seed.userId, '--name', `revocation ${round}`])) as {
        api_token: string;
        token_id: string;
      };
      const me = (base: string) =>
        fetch(`${base}/user/me`, { headers: { authorization: `Bearer ${minted.api_token}` }, signal: AbortSignal.timeout(10_000) }).then(async (res) => {
          await res.arrayBuffer();
          return res.status;
        });
      await everyReplicaAccepts(cluster, me);
      // The API revokes for people only (requires_person) and the CLI's answer comes a process
      // exit after its commit: the revocation is the same UPDATE, committed here, measured from
      // the commit (the table's trigger announces it as for any other path).
      await cluster.query('update api_tokens set revoked_at = now() where id = $1', [minted.token_id]);
      const at = Date.now();
      tokenTimes.push(...(await untilRefusedEverywhere(cluster, at, me)));

      // An MCP server of its own, its token rotated.
      const created = await fetch(`${cluster.lbUrl}/user-toolbox/utbx_dyn_all/mcp`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ name: `revocation ${round} ${Date.now()}` }),
      });
      if (created.status !== 201) throw new Error(`createMcpServer answered ${created.status}: ${await created.text()}`);
      const mcp = (await created.json()) as { token: string; mcp_server: { id: string } };
      const ping = (base: string) =>
        postMcp(base, mcp.mcp_server.id, mcp.token, { jsonrpc: '2.0', id: 1, method: 'ping' }, 10_000).then(async (res) => {
          await res.arrayBuffer();
          return res.status;
        });
      await everyReplicaAccepts(cluster, ping);
      const rotated = await fetch(`${cluster.lbUrl}/user-toolbox/utbx_dyn_all/mcp/${mcp.mcp_server.id}/rotate`, {
        method: 'POST',
        headers: { authorization: headers.authorization!, 'x-organization-id': headers['x-organization-id']! },
      });
      const rotatedAt = Date.now();
      if (rotated.status !== 200) throw new Error(`rotateMcpServerToken answered ${rotated.status}: ${await rotated.text()}`);
      mcpTimes.push(...(await untilRefusedEverywhere(cluster, rotatedAt, ping)));
    }
    const worst = (times: (number | null)[]) => (times.some((t) => t === null) ? null : Math.max(...(times as number[])));
    const tokenMax = worst(tokenTimes);
    const mcpMax = worst(mcpTimes);
    const show = (ms: number | null) => (ms === null ? `not within ${GIVE_UP_MS} ms` : ms);
    return {
      held: tokenMax !== null && mcpMax !== null && tokenMax <= PROMISE_MS && mcpMax <= PROMISE_MS,
      figures: {
        'api token refused everywhere, max ms': show(tokenMax),
        'mcp token refused everywhere, max ms': show(mcpMax),
        promise: `${PROMISE_MS} ms`,
        rounds: ROUNDS,
      },
      notes: [
        `promise: a revoked API token or a rotated MCP server token is refused (401) on every replica within ${PROMISE_MS} ms of the change's answer (NOTIFY on commit clears each replica's credential cache)`,
        `per replica and round, ms: api token ${tokenTimes.join(' ')}; mcp token ${mcpTimes.join(' ')}`,
      ],
    };
  },
};
