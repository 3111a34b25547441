// `npx tsx scripts/bench/user-toolboxes.ts`: what computing `utbx_dyn_all` costs for a member
// with 10 connections of 100 cached tools each (BENCH_CONNECTIONS, BENCH_TOOLS), in one run:
//
//   resolve          resolveUserToolbox(…, 'utbx_dyn_all'): the member's connections, their states
//   policy           Policy.subjectOf + Policy.load (BENCH_RESTRICTIONS restrictions, default 20,
//                    two of them deny rules that match tools of the box)
//   toolsOf          toolsOf(box, policy): which cached lists changed (their fetched_at), each
//                    tool named and evaluated; lists parsed before are kept in process
//   toolsOf, every list refetched   the same when every list changed since the last call
//                    (each is read and parsed again: the cold figure)
//   all three        what the MCP endpoint does for a `tools/list`
//   GET (loopback)   GET /user-toolbox/utbx_dyn_all through the app (resolve + the response)
//
// Sequential, in process (the app listens on loopback for the GET); nothing reaches an
// upstream: tools come from `connection_tools`. BENCH_COUNT runs per target (default 200);
// DATABASE_URL names a scratch PostgreSQL database, else the embedded one.
import { resolveUserToolbox, toolsOf } from '../../src/areas/user-toolboxes';
import { newId } from '../../src/lib/ids';
import { loadPolicy, policySubjectOf } from '../../src/access/policy';
import { COUNT, measure, startBenchApp } from './support';

const CONNECTIONS = Math.min(100, Math.max(1, Number(process.env.BENCH_CONNECTIONS ?? 10)));
const TOOLS = Math.min(2000, Math.max(1, Number(process.env.BENCH_TOOLS ?? 100)));
const RESTRICTIONS = Math.min(1000, Math.max(0, Number(process.env.BENCH_RESTRICTIONS ?? 20)));

/** A tool as the connections area caches it (ConnectionTool), with a modest input schema. */
function cachedTool(i: number) {
  return {
    name: `tool_${String(i).padStart(3, '0')}`,
    title: null,
    description: `Generated tool ${i}: does one thing to a record and answers what it changed.`,
    input_schema: { type: 'object', properties: { id: { type: 'string' }, note: { type: 'string', maxLength: 500 } }, required: ['id'] },
    output_schema: null,
    annotations: { readOnlyHint: i % 2 === 0 },
  };
}

async function main() {
  const { database, deps, base, factories, close } = await startBenchApp({ VALIDATE_RESPONSES: 'off' });
  const org = await factories.org();
  const userId = org.ownerId;
  const tools = Array.from({ length: TOOLS }, (_, i) => cachedTool(i + 1));
  for (let c = 0; c < CONNECTIONS; c += 1) {
    const id = newId('connection');
    const slug = `bench-c${String(c).padStart(2, '0')}`;
    await database.db
      .insertInto('connections')
      .values({
        id,
        org_id: org.orgId,
        connector_slug: slug,
        owner_user_id: userId,
        name: slug,
        status: 'active',
        auth_type: 'none',
        credentials_enc: null,
        last_used_at: null,
        last_error: null,
        oauth_client_enc: null,
        authorize_state_hash: null,
        authorize_enc: null,
        authorize_expires_at: null,
        status_reason: null,
      })
      .execute();
    await database.db
      .insertInto('connection_tools')
      .values({ connection_id: id, tools: JSON.stringify(tools), fetched_at: new Date() })
      .execute();
  }
  for (let r = 0; r < RESTRICTIONS; r += 1) {
    // Two deny rules that hit the box (every tool_00* of bench-c00, tool_1* everywhere); the rest name other connectors.
    const hits =
      r === 0
        ? { match_connector_slug: 'bench-c00', match_tool_pattern: 'tool_00*' }
        : r === 1
          ? { match_connector_slug: null, match_tool_pattern: 'tool_1*' }
          : { match_connector_slug: `other-${r}`, match_tool_pattern: '*_write' };
    await database.db
      .insertInto('restrictions')
      .values({
        id: newId('restriction'),
        org_id: org.orgId,
        name: `r${r}`,
        ...hits,
        effect: r % 3 === 2 ? 'require_approval' : 'deny',
        applies_to_everyone: true,
        is_active: true,
      })
      .execute();
  }

  const resolve = async () => {
    const box = await resolveUserToolbox(database.db, org.orgId, userId, 'utbx_dyn_all');
    if (!box) throw new Error('utbx_dyn_all did not resolve');
    return box;
  };
  const policyNow = async () => loadPolicy(database.db, await policySubjectOf(database.db, org.orgId, userId), new Date());
  const box = await resolve();
  const policy = await policyNow();
  const offered = await toolsOf(deps, box, policy);
  const headers = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId };
  const get = async () => {
    const res = await fetch(`${base}/user-toolbox/utbx_dyn_all`, { headers });
    if (res.status !== 200) throw new Error(`getUserToolbox answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  };

  const measured = async (label: string, run: () => Promise<unknown>, before?: () => Promise<unknown>) => ({ label, ...(await measure(run, before)) });
  const results = [
    await measured('resolve', resolve),
    await measured('policy (subjectOf + load)', policyNow),
    await measured('toolsOf', () => toolsOf(deps, box, policy)),
    // Every list fetched again upstream since the last call: each is read and parsed again.
    await measured(
      'toolsOf, every list refetched',
      () => toolsOf(deps, box, policy),
      () => database.db.updateTable('connection_tools').set({ fetched_at: new Date() }).execute(),
    ),
    await measured('resolve + policy + toolsOf', async () => toolsOf(deps, await resolve(), await policyNow())),
    await measured('GET /user-toolbox/utbx_dyn_all', get),
  ];
  console.log(
    `utbx_dyn_all for a member with ${CONNECTIONS} connections of ${TOOLS} cached tools each (${CONNECTIONS * TOOLS} tools, ${offered.length} offered after ${RESTRICTIONS} restrictions), ` +
      `${COUNT} sequential runs per target, ${process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded PGlite'}:`,
  );
  for (const r of results) {
    console.log(
      `  ${r.label.padEnd(32)} p50 ${r.p50.toFixed(2).padStart(7)} ms   p90 ${r.p90.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms`,
    );
  }
  const all = results[4]!;
  const cold = results[3]!;
  console.log(
    `  per tool (resolve + policy + toolsOf, p50): ${((all.p50 * 1000) / (CONNECTIONS * TOOLS)).toFixed(2)} µs; with every list refetched (toolsOf alone): ${((cold.p50 * 1000) / (CONNECTIONS * TOOLS)).toFixed(2)} µs`,
  );

  await close();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
