// `npx tsx scripts/bench/audit-log.ts`: what `GET /audit-log` costs for one organization with
// 1,000 and with 1,000,000 entries, on PostgreSQL: the first page, a page deep in (the cursor
// of the entry 90% of the way down), and the first page of a filtered list (`action=team.*`,
// a family that holds a fifth of the entries), `limit=50`, one request at a time through the
// app on loopback with an API token (p50/p90/p99 over BENCH_COUNT runs, default 200).
//
// The entries are written in bulk with generate_series (actions, actors and targets varied,
// two seconds apart, the newest a minute ago) into a scratch database `cp_bench_<pid>_<random>`
// made on the server at BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres)
// and dropped at the end, also on Ctrl-C. BENCH_EXPLAIN=1 also prints the plans of the two pages. Bounded: BENCH_DEADLINE_SECONDS (default 900) stops the
// run, drops the database and exits non-zero.
import { sql } from 'kysely';
import { listEntriesQuery } from '../../src/areas/audit-log/audit-log.repo';
import { filteredCursorAfter } from '../../src/http/pagination';
import { createScratchDatabase, type ScratchDatabase } from './scratch-database';
import { COUNT, measure, startBenchApp, type BenchApp, type Latency } from './support';

const SIZES = [1_000, 1_000_000] as const;
const LIMIT = 50;
const DEADLINE_S = Math.min(3600, Math.max(60, Number(process.env.BENCH_DEADLINE_SECONDS ?? 900)));
const ACTIONS = [
  'team.created',
  'team.member_added',
  'member.roles_updated',
  'invite.created',
  'connection.created',
  'toolbox.updated',
  'restriction.updated',
  'role.created',
  'org_domain.created',
  'connector.updated',
];

let scratch: ScratchDatabase | null = null;
let app: BenchApp | null = null;

let cleaning: Promise<void> | null = null;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await app?.close().catch(() => undefined);
    await scratch?.drop();
  })();
  return cleaning;
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    void cleanup().finally(() => process.exit(130));
  });
}

/**
 * Entries number `from`..`to` of the organization (1 is the oldest), `created_at` two seconds
 * apart ending a minute ago for entry `total`; ids sort as creation order, as real ones do
 * (`lane`, 0–7, keeps two organizations' generated ids apart).
 */
async function seed(appDb: BenchApp['database']['db'], orgId: string, userIds: string[], from: number, to: number, total: number, lane = 0): Promise<void> {
  const prefix = `aud_${lane}`;
  const actions = sql.raw(`array[${ACTIONS.map((a) => `'${a}'`).join(',')}]`);
  const users = sql.raw(`array[${userIds.map((u) => `'${u}'`).join(',')}]`);
  await sql`
    insert into audit_log (id, org_id, actor_type, actor_id, actor_user_id, action, target_type, target_id, changes, ip, user_agent, request_id, created_at)
    select ${prefix} || lpad(to_hex(i), 25, '0'), ${orgId}, 'user', (${users})[1 + i % ${userIds.length}], (${users})[1 + i % ${userIds.length}],
           (${actions})[1 + i % ${ACTIONS.length}], split_part((${actions})[1 + i % ${ACTIONS.length}], '.', 1), 'team_0' || lpad(to_hex(i % 5000), 25, '0'),
           jsonb_build_object('name', jsonb_build_object('from', 'Team ' || i, 'to', 'Team ' || (i + 1))),
           '203.0.113.' || (i % 250), 'bench/1.0', 'req_0' || lpad(to_hex(i), 25, '0'),
           now() - interval '1 minute' - make_interval(secs => (${total} - i) * 2)
    from generate_series(${from}::bigint, ${to}::bigint) as i`.execute(appDb);
  // As a table that has lived a while is: vacuumed (its visibility map set) and analyzed.
  await sql`vacuum (analyze) audit_log`.execute(appDb);
}

const ms = (n: number) => `${n.toFixed(2)} ms`;
const row = (label: string, l: Latency) => `  ${label.padEnd(44)} p50 ${ms(l.p50).padStart(10)}  p90 ${ms(l.p90).padStart(10)}  p99 ${ms(l.p99).padStart(10)}`;

async function main(): Promise<void> {
  const deadline = setTimeout(() => {
    console.error(`Stopped: the run passed BENCH_DEADLINE_SECONDS (${DEADLINE_S} s).`);
    void cleanup().finally(() => process.exit(2));
  }, DEADLINE_S * 1000);
  deadline.unref();

  scratch = await createScratchDatabase();
  process.env.DATABASE_URL = scratch.url;
  app = await startBenchApp({ VALIDATE_RESPONSES: 'off' });
  const { database, base, factories } = app;
  const org = await factories.org();
  const userIds = [org.ownerId];
  for (let i = 0; i < 9; i += 1) userIds.push(await factories.member(org.orgId, { roles: ['admin'] }));
  // Another organization's entries share the table, as they would.
  const neighbour = await factories.org();
  const headers = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId };
  const get = async (query: string) => {
    const res = await fetch(`${base}/audit-log?${query}`, { headers });
    if (res.status !== 200) throw new Error(`GET /audit-log?${query} answered ${res.status}: ${await res.text()}`);
    const body = (await res.json()) as { data: unknown[] };
    if (body.data.length !== LIMIT) throw new Error(`GET /audit-log?${query} answered ${body.data.length} entries, not ${LIMIT}.`);
  };

  console.log(`GET /audit-log?limit=${LIMIT} on PostgreSQL (${COUNT} runs per figure, one at a time, over loopback)`);
  let seeded = 0;
  const results: Record<number, { first: Latency; deep: Latency; family: Latency }> = {};
  for (const size of SIZES) {
    const started = Date.now();
    await seed(database.db, org.orgId, userIds, seeded + 1, size, SIZES[1]);
    if (size === SIZES[1]) await seed(database.db, neighbour.orgId, [neighbour.ownerId], 1, 100_000, 100_000, 1);
    seeded = size;
    const count = await database.db
      .selectFrom('audit_log')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('org_id', '=', org.orgId)
      .executeTakeFirstOrThrow();
    // The entry 90% of the way down, newest first: its cursor opens a page deep in.
    const deepAt = Math.floor(size * 0.9);
    const { id: deepId } = await database.db
      .selectFrom('audit_log')
      .select('id')
      .where('org_id', '=', org.orgId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .offset(deepAt)
      .limit(1)
      .executeTakeFirstOrThrow();
    console.log(`\n${Number(count.n).toLocaleString('en')} entries for the organization (seeded in ${((Date.now() - started) / 1000).toFixed(1)} s)`);
    const first = await measure(() => get(`limit=${LIMIT}`));
    console.log(row('first page', first));
    const deep = await measure(() => get(`limit=${LIMIT}&cursor=${filteredCursorAfter(deepId, {})}`));
    console.log(row(`page after entry ${deepAt.toLocaleString('en')}`, deep));
    const family = await measure(() => get(`limit=${LIMIT}&action=team.*`));
    console.log(row('first page, action=team.*', family));
    results[size] = { first, deep, family };
    if (process.env.BENCH_EXPLAIN === '1') {
      for (const [label, after] of [
        ['first page', undefined],
        ['deep page', deepId],
      ] as const) {
        const plan = await listEntriesQuery(database.db, org.orgId, new Date(Date.now() - 90 * 86_400_000), { limit: LIMIT, after }, {}).explain(
          'text',
          sql`analyze, buffers`,
        );
        console.log(`  plan, ${label}:\n${plan.map((r) => `    ${String(Object.values(r)[0])}`).join('\n')}`);
      }
    }
  }
  const [small, large] = SIZES;
  const a = results[small]!;
  const b = results[large]!;
  console.log(
    `\np50 at ${large.toLocaleString('en')} / at ${small.toLocaleString('en')}: first page ${(b.first.p50 / a.first.p50).toFixed(2)}×, deep page ${(b.deep.p50 / a.deep.p50).toFixed(2)}×, action=team.* ${(b.family.p50 / a.family.p50).toFixed(2)}×`,
  );
  console.log(`deep page / first page at ${large.toLocaleString('en')}: ${(b.deep.p50 / b.first.p50).toFixed(2)}×`);
  clearTimeout(deadline);
}

main()
  .then(() => cleanup())
  .catch(async (err) => {
    console.error(err);
    await cleanup();
    process.exitCode = 1;
  });
