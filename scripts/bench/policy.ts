// `npx tsx scripts/bench/policy.ts`: what evaluating restrictions costs a tool listing or a call.
//
//   subjectOf   Policy.subjectOf: the member's roles and teams (two queries).
//   load        Policy.load: the active restrictions applying to the member and their live
//               exceptions (two queries), globs compiled.
//   evaluate    Policy.evaluate per tool (pure, no I/O), over a mix of upstream tools and
//               synthetic tools of three steps, in µs per tool.
//
// The setting: one organization with 200 restrictions (deny and require_approval; connector,
// glob and synthetic matches; for everyone, roles, teams or users), a member holding 20 roles
// and in 20 teams so that most restrictions apply to them, and 20 approved exceptions. Rows are
// written directly; nothing listens on a port. On the embedded database unless DATABASE_URL
// names a scratch PostgreSQL database (the tables are migrated there).
//
// Settings: BENCH_COUNT loads to time (default 200, at most 5000), BENCH_TOOLS tools per
// evaluation pass (default 1000, at most 100000).
import { migrateToLatest } from '../../src/db/database';
import { newId } from '../../src/lib/ids';
import { type ToolRef, loadPolicy, policySubjectOf } from '../../src/access/policy';
import { Factories } from '../../test/support/factories';
import { COUNT, measure, openBenchDatabase, percentile } from './support';

const TOOLS = Math.min(100_000, Math.max(10, Number(process.env.BENCH_TOOLS ?? 1000)));
const RESTRICTIONS = 200;
const GROUPS = 20;

const CONNECTORS = ['github', 'linear', 'slack', 'notion', 'jira', 'acme-crm', 'docs', 'tickets'];
const VERBS = ['list', 'get', 'create', 'update', 'delete', 'export', 'search', 'archive'];
const NOUNS = ['issue', 'repo', 'branch', 'comment', 'page', 'message', 'contact', 'ticket'];

const pick = <T>(list: readonly T[], i: number): T => list[i % list.length] as T;

async function main() {
  const database = await openBenchDatabase(4);
  await migrateToLatest(database.db);
  const db = database.db;
  const factories = new Factories(db);
  const org = await factories.org();
  const roleIds: string[] = [];
  const teamIds: string[] = [];
  for (let i = 0; i < GROUPS; i += 1) roleIds.push(await factories.customRole(org.orgId, [], `Bench role ${i}`));
  const userId = await factories.member(org.orgId, { roles: roleIds });
  const otherId = await factories.member(org.orgId);
  for (let i = 0; i < GROUPS; i += 1) teamIds.push(await factories.team(org.orgId, `Bench team ${i}`, [userId]));
  // Another 20 of each the member is not in, so that restrictions also name groups they lack.
  const foreignRoles: string[] = [];
  const foreignTeams: string[] = [];
  for (let i = 0; i < GROUPS; i += 1) {
    foreignRoles.push(await factories.customRole(org.orgId, [], `Bench other role ${i}`));
    foreignTeams.push(await factories.team(org.orgId, `Bench other team ${i}`));
  }
  const syntheticIds: string[] = [];
  for (let i = 0; i < 10; i += 1) {
    const id = newId('syntheticTool');
    syntheticIds.push(id);
    await db
      .insertInto('synthetic_tools')
      .values({
        id,
        org_id: org.orgId,
        name: `Bench synthetic ${i}`,
        description: 'bench',
        input_schema: '{}',
        output_schema: null,
        steps: '[]',
        output: '{}',
        created_by_user_id: null,
      })
      .execute();
  }

  const restrictionIds: string[] = [];
  for (let i = 0; i < RESTRICTIONS; i += 1) {
    const id = newId('restriction');
    restrictionIds.push(id);
    const kind = i % 10;
    const synthetic = kind === 9 ? pick(syntheticIds, i) : null;
    const who = i % 5; // 0 everyone, 1 roles, 2 teams, 3 users, 4 groups the member is not in
    await db
      .insertInto('restrictions')
      .values({
        id,
        org_id: org.orgId,
        name: `Bench restriction ${i}`,
        description: null,
        match_connector_slug: synthetic || kind === 3 ? null : pick(CONNECTORS, i),
        match_tool_pattern:
          synthetic || kind === 4
            ? null
            : ([`${pick(VERBS, i)}_*`, `*_${pick(NOUNS, i)}`, `${pick(VERBS, i)}_?${pick(NOUNS, i + 1).slice(1)}`, `*${pick(NOUNS, i).slice(0, 3)}*`][
                i % 4
              ] as string),
        match_synthetic_tool_id: synthetic,
        effect: i % 5 === 1 ? 'deny' : 'require_approval',
        applies_to_everyone: who === 0,
        applies_to_role_ids: who === 1 ? [pick(roleIds, i), pick(foreignRoles, i)] : who === 4 ? [pick(foreignRoles, i)] : [],
        applies_to_team_ids: who === 2 ? [pick(teamIds, i), pick(foreignTeams, i)] : who === 4 ? [pick(foreignTeams, i)] : [],
        applies_to_user_ids: who === 3 ? [userId, otherId] : [],
        is_active: i % 17 !== 0,
        created_by_user_id: null,
      })
      .execute();
  }
  for (let i = 0; i < 20; i += 1) {
    await db
      .insertInto('access_requests')
      .values({
        id: newId('accessRequest'),
        org_id: org.orgId,
        requester_user_id: userId,
        restriction_id: pick(restrictionIds, i * 7 + 1),
        connector_slug: i % 2 === 0 ? pick(CONNECTORS, i) : null,
        tool_name: i % 4 === 0 ? `${pick(VERBS, i)}_${pick(NOUNS, i)}` : null,
        synthetic_tool_id: null,
        reason: 'bench',
        status: 'approved',
        resolved_at: new Date(),
        exception_expires_at: i % 3 === 0 ? new Date(Date.now() + 3_600_000) : null,
      })
      .execute();
  }

  const now = new Date();
  const subjectTime = await measure(() => policySubjectOf(db, org.orgId, userId));
  const subject = await policySubjectOf(db, org.orgId, userId);
  const loadTime = await measure(() => loadPolicy(db, subject, now));
  const policy = await loadPolicy(db, subject, now);

  const tools: ToolRef[] = [];
  for (let i = 0; i < TOOLS; i += 1) {
    if (i % 10 === 9) {
      tools.push({
        kind: 'synthetic',
        id: pick(syntheticIds, i),
        steps: [0, 1, 2].map((s) => ({ connector_slug: pick(CONNECTORS, i + s), tool: `${pick(VERBS, i + s)}_${pick(NOUNS, i * 3 + s)}` })),
      });
    } else {
      tools.push({ kind: 'upstream', connector_slug: pick(CONNECTORS, i), tool: `${pick(VERBS, i >> 3)}_${pick(NOUNS, i >> 1)}` });
    }
  }
  let listed = 0;
  let callable = 0;
  let held = 0;
  for (const tool of tools) {
    const v = policy.evaluate(tool);
    if (v.listed) listed += 1;
    if (v.callable) callable += 1;
    if (v.listed && v.heldBy.length > 0) held += 1;
  }
  // Passes over every tool; the median pass, per tool (the machine may be shared).
  const passes = 20;
  const perPass: number[] = [];
  for (let p = 0; p < passes; p += 1) {
    const start = process.hrtime.bigint();
    for (const tool of tools) policy.evaluate(tool);
    perPass.push(Number(process.hrtime.bigint() - start) / 1e3 / tools.length);
  }
  perPass.sort((a, b) => a - b);
  const perTool = percentile(perPass, 50);
  const bestPerTool = perPass[0] as number;

  const applying = policy.restrictionIds.length;
  console.log(
    `policy bench (${database.kind} database): ${RESTRICTIONS} restrictions, member with ${subject.roleIds.length} roles and ${subject.teamIds.length} teams, ${applying} restrictions apply to them`,
  );
  console.log(`  subjectOf  p50 ${subjectTime.p50.toFixed(3)} ms  p90 ${subjectTime.p90.toFixed(3)} ms  p99 ${subjectTime.p99.toFixed(3)} ms  (${COUNT} runs)`);
  console.log(`  load       p50 ${loadTime.p50.toFixed(3)} ms  p90 ${loadTime.p90.toFixed(3)} ms  p99 ${loadTime.p99.toFixed(3)} ms  (${COUNT} runs)`);
  console.log(
    `  evaluate   ${perTool.toFixed(2)} µs per tool (median pass; best ${bestPerTool.toFixed(2)})  (${tools.length} tools × ${passes} passes; ${listed} listed, ${held} of them held, ${callable} callable)`,
  );
  console.log(`  a listing of 100 tools: load + 100 evaluations ≈ ${(loadTime.p50 + (perTool * 100) / 1000).toFixed(3)} ms`);
  await database.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
