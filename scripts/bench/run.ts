// `make bench`: the real server against a bare Express 5 hello-world, with autocannon.
//
// Every server is its own child process on 127.0.0.1; the load generator is this process.
// The real server runs on PostgreSQL (a fresh database `cp_bench_<pid>_<random>` on the server
// at BENCH_DATABASE_URL, dropped at the end), in production mode, at the default log level
// with its stdout thrown away (writing the logs is part of the real cost), with a rate limit
// high enough to be exercised but never to trip.
//
// Settings (environment):
//   BENCH_DATABASE_URL  PostgreSQL server (default postgres://postgres@127.0.0.1:5432/postgres)
//   BENCH_DURATION      seconds measured per target (default 10)
//   BENCH_WARMUP        seconds of warm-up per target, not measured (default 3)
//   BENCH_CONNECTIONS   concurrent connections (default 50)
//   BENCH_SOURCE=1      run src/main.ts through tsx instead of building dist/ first
//   BENCH_DIAGNOSE=1    also: both targets with LOG_LEVEL=silent; the baseline and both targets
//                       under --cpu-prof (summarised by concern, package and function); the CPU
//                       the server, PostgreSQL and the load generator used per request
//   BENCH_PROFILE_OUT   with BENCH_DIAGNOSE: a directory to keep the .cpuprofile files in (open them
//                       in Chrome DevTools or speedscope)
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { openDatabase } from '../../src/db/database';
import { cursorAfter } from '../../src/http/pagination';
import { PathRouter } from '../../src/http/router';
import { newId } from '../../src/lib/ids';
import { loadSpec } from '../../src/spec';
import { Factories } from '../../test/support/factories';
import { describeOperations, type OperationMeta } from '../../src/spec/operations';
import {
  atCleanup,
  backendCpuMs,
  backendCpuSpent,
  cleanUpOnSignals,
  cleanup,
  cpuMs,
  freePort,
  HOST,
  realServerArgs,
  ROOT,
  startChild,
  startRealServer,
  stopChild,
  tempDir,
  tsxArgs,
  waitUntilUp,
  type Child,
} from './processes';
import { createScratchDatabase, onDatabase, SERVER_URL, type ScratchDatabase } from './scratch-database';
import { createBenchDestination } from './support';

const DURATION = positive('BENCH_DURATION', 10);
const WARMUP = positive('BENCH_WARMUP', 3, true);
const CONNECTIONS = positive('BENCH_CONNECTIONS', 50);
const DIAGNOSE = process.env.BENCH_DIAGNOSE === '1';
const START_TIMEOUT_MS = 60_000;
// The highest RATE_LIMIT_REQUESTS the configuration accepts; far above what a run can send.
const RATE_LIMIT = '10000000';

function positive(name: string, fallback: number, zeroOk = false): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < (zeroOk ? 0 : 1) || value > 600) {
    throw new Error(`${name} must be a whole number from ${zeroOk ? 0 : 1} to 600; got "${raw}".`);
  }
  return value;
}

cleanUpOnSignals();
let scratch: ScratchDatabase | null = null;

const LIST_SIZES = [1_000, 100_000] as const;
/** Rows of a second organization created after the first's LIST_SIZES rows. */
const OTHER_TENANT_ROWS = 10_000;

/** Copies destination `from` `count` times (names numbered from `start`), in batches; returns how many. */
async function seedDestinations(url: string, from: string, count: number, start: number): Promise<number> {
  const BATCH = 10_000;
  await onDatabase(url, async (client) => {
    for (let done = 0; done < count; done += BATCH) {
      const ids = Array.from({ length: Math.min(BATCH, count - done) }, () => newId('notificationDestination'));
      await client.query(
        `insert into notification_destinations (id, org_id, name, type, config, webhook_url_enc, event_types, is_active, created_by_user_id)
         select n.id, d.org_id, d.name || ' ' || (n.ordinal + $3), d.type, d.config, d.webhook_url_enc, d.event_types, d.is_active, d.created_by_user_id
         from notification_destinations d, unnest($2::text[]) with ordinality as n(id, ordinal)
         where d.id = $1`,
        [from, ids, start + done],
      );
    }
    // Vacuumed as well as analyzed: a steady table, not one that autovacuum starts on (its
    // insert threshold) while the next page is being measured on the same two cores.
    await client.query('vacuum analyze notification_destinations');
  });
  return count;
}

/**
 * The route lookup of one request, timed over the whole document and over a document of
 * 10 operations holding the same one; rounds alternate so that drift hits both alike.
 */
function routerTimes() {
  const { operations } = describeOperations(loadSpec());
  const entries = Object.entries(operations);
  const target = entries.find(([id]) => id === 'getNotificationDestination')!;
  const build = (list: [string, OperationMeta][]) => {
    const router = new PathRouter<string>();
    for (const [id, meta] of list) router.add(meta.method, meta.path, id);
    return router;
  };
  const full = build(entries);
  const small = build([target, ...entries.filter(([id]) => id !== target[0]).slice(0, 9)]);
  const path = `/notification-destination/${newId('notificationDestination')}`;
  const lookups = 200_000;
  const rounds = 10;
  const time = (router: PathRouter<string>) => {
    const started = process.hrtime.bigint();
    for (let i = 0; i < lookups; i++) if (router.match('GET', path)?.route !== target[0]) throw new Error('the router missed');
    return Number(process.hrtime.bigint() - started);
  };
  time(full);
  time(small);
  let fullNs = 0;
  let smallNs = 0;
  for (let r = 0; r < rounds; r++) {
    fullNs += time(full);
    smallNs += time(small);
  }
  return {
    path: '/notification-destination/{id}',
    lookups,
    rounds,
    full: { operations: entries.length, ns: fullNs / rounds / lookups },
    small: { operations: 10, ns: smallNs / rounds / lookups },
  };
}

async function waitForFile(file: string, child: Child): Promise<string> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (existsSync(file)) return readFileSync(file, 'utf8');
    if (child.exitCode !== undefined) throw new Error(`${child.name} exited before writing ${file}:\n${child.stderr.join('')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${file} did not appear within ${START_TIMEOUT_MS / 1000} s.`);
}

interface Measurement {
  target: string;
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  total: number;
  /** When the measured part ran, in µs of the monotonic clock (what V8 profiles use on Linux). */
  window: [number, number];
  /** Cores busy on average while measuring: the server, the benchmark database's backends (local server only), this process. */
  cpu: { server: number | null; postgres: number | null; loadGenerator: number };
}

const nowMicros = () => Number(process.hrtime.bigint() / 1000n);

async function load(target: string, url: string, headers: Record<string, string> = {}, server?: Child): Promise<Measurement> {
  const options = { url, connections: CONNECTIONS, headers, timeout: 10 };
  if (WARMUP > 0) await autocannon({ ...options, duration: WARMUP });
  const pid = server?.process.pid;
  const before = { server: pid ? cpuMs(pid) : null, postgres: await backendCpuMs(scratch?.name), bench: process.cpuUsage() };
  const started = nowMicros();
  const result = await autocannon({ ...options, duration: DURATION });
  const window: [number, number] = [started, nowMicros()];
  const serverAfter = pid ? cpuMs(pid) : null;
  const postgresAfter = await backendCpuMs(scratch?.name);
  const bench = process.cpuUsage(before.bench);
  const seconds = (window[1] - window[0]) / 1e6;
  return {
    window,
    cpu: {
      server: serverAfter !== null && before.server !== null ? (serverAfter - before.server) / 1000 / seconds : null,
      // A backend that started during the measurement counts whole; one that ended is missed.
      postgres: postgresAfter === null ? null : (backendCpuSpent(before.postgres, postgresAfter) as number) / 1000 / seconds,
      loadGenerator: (bench.user + bench.system) / 1e6 / seconds,
    },
    target,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    total: result.requests.total,
  };
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function printTable(rows: Measurement[], baseline: number): void {
  const header = ['target', 'req/s avg', 'p50 ms', 'p99 ms', 'non-2xx', 'errors', 'requests', '× baseline'];
  const lines = rows.map((r) => [r.target, fmt(r.rps), fmt(r.p50), fmt(r.p99), fmt(r.non2xx), fmt(r.errors), fmt(r.total), fmt(r.rps / baseline, 2)]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const row = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(row(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const l of lines) console.log(row(l));
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Copies a run's .cpuprofile files to BENCH_PROFILE_OUT, when set. */
function keepProfiles(dir: string, label: string): void {
  const out = process.env.BENCH_PROFILE_OUT;
  if (!out) return;
  mkdirSync(out, { recursive: true });
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'))) copyFileSync(join(dir, file), join(out, `${label}-${file}`));
}

function readProfile(dir: string): CpuProfile | null {
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  return file ? (JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile) : null;
}

/** The package (or "this project", "node internals", "(native)") a frame belongs to. */
function areaOf(frame: { functionName: string; url: string }): string {
  if (frame.url === '') return `(${frame.functionName || 'native'})`;
  const url = frame.url.replace(/^file:\/\//, '').replace(`${ROOT}/`, '');
  // Wherever node_modules is (a worktree's may be a link to another checkout's, whose frames carry that path).
  const modules = url.lastIndexOf('node_modules/');
  if (modules >= 0) {
    const parts = url.slice(modules).split('/');
    return parts.slice(1, parts[1]?.startsWith('@') ? 3 : 2).join('/');
  }
  if (url.startsWith('node:')) return 'node internals';
  if (/^(dist\/)?(src|generated)\//.test(url)) return 'this project';
  return url;
}

const CONCERNS: [string, RegExp][] = [
  ['database client (kysely, pg)', /^(kysely|pg|pg-.*|postgres-.*|pgpass|split2)$/],
  [
    'logging (pino, pino-http)',
    /^(pino|pino-.*|@pinojs\/.*|sonic-boom|fast-redact|quick-format-unescaped|thread-stream|safe-stable-stringify|atomic-sleep|on-exit-leak-free)$/,
  ],
  [
    'openapi-backend + ajv',
    /^(openapi-backend|ajv|ajv-formats|fast-uri|fast-deep-equal|json-schema-traverse|lodash|bath-es5|mock-json-schema|openapi-schema-validator)$/,
  ],
  ['helmet', /^helmet$/],
  ['rate limiter', /^rate-limiter-flexible$/],
  ['ids (ulid, crypto random)', /^ulid$/],
  ['this project (src/)', /^this project$/],
];

/** What a sample's time was for: the nearest package frame on its stack (Node internals and native code count for their caller). */
function concernOf(areas: string[]): string {
  for (const area of areas) {
    if (area.startsWith('(') || area === 'node internals') continue;
    for (const [name, match] of CONCERNS) if (match.test(area)) return name;
    return 'express & its dependencies, other packages';
  }
  return 'Node http/net (no package on the stack)';
}

/**
 * Where the samples of a .cpuprofile that fall inside `window` went: self time by package,
 * inclusive time by package (a sample counts once for every package on its stack), and the
 * functions with the most self time.
 */
function summariseProfile(profile: CpuProfile, window: [number, number], label: string): string[] {
  // Sample times are the profile's start plus the running sum of the deltas, on the same clock as
  // process.hrtime on Linux; if the clocks disagree, the whole profile is summarised instead.
  const inWindow = profile.startTime <= window[1] && profile.startTime > window[0] - 600_000_000;
  const byNode = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const selfByArea = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const concerns = new Map<string, number>();
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  let at = profile.startTime;
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    at += dt;
    if (inWindow && (at < window[0] || at > window[1])) return;
    total += dt;
    const frame = byNode.get(id)?.callFrame;
    if (!frame) return;
    const area = areaOf(frame);
    add(selfByArea, area, dt);
    const url = frame.url.replace(/^file:\/\//, '').replace(`${ROOT}/`, '');
    add(self, `${frame.functionName || '(anonymous)'}  ${url}${url ? `:${frame.lineNumber + 1}` : ''}`, dt);
    const stack: string[] = [];
    for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
      const f = byNode.get(n)?.callFrame;
      if (f) stack.push(areaOf(f));
    }
    for (const a of new Set(stack.filter((a) => !a.startsWith('(')))) add(inclusive, a, dt);
    add(concerns, ['((garbage collector))', '((idle))', '((program))'].includes(area) ? area.slice(1, -1) : concernOf(stack), dt);
  });
  if (total === 0) return [`${label}: no samples in the measured window`];
  const pct = (v: number) => `${((100 * v) / total).toFixed(1).padStart(5)} %`;
  const top = (m: Map<string, number>, n: number) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
  return [
    `${label}: ${inWindow ? `${(total / 1e6).toFixed(1)} s of samples while measuring (autocannon's ${DURATION} s plus connecting and draining)` : 'whole profile, start-up included'}`,
    '  by concern (each sample counted once, for the nearest package on its stack):',
    ...top(concerns, 12).map(([k, v]) => `    ${pct(v)}  ${k}`),
    '  self time by package:',
    ...top(selfByArea, 8).map(([k, v]) => `    ${pct(v)}  ${k}`),
    '  inclusive time by package (on the stack):',
    ...top(inclusive, 10).map(([k, v]) => `    ${pct(v)}  ${k}`),
    '  top functions (self time):',
    ...top(self, 10).map(([k, v]) => `    ${pct(v)}  ${k}`),
  ];
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const cpu = cpus();
  console.log(
    `Machine: ${cpu.length} CPU(s), ${cpu[0]?.model ?? 'unknown'}; ${(totalmem() / 2 ** 30).toFixed(1)} GiB; Node ${process.version} (${process.platform}/${process.arch}); load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} before the run`,
  );
  console.log(
    `Load: autocannon, ${CONNECTIONS} connections, ${WARMUP} s warm-up + ${DURATION} s measured per target; servers are separate processes on ${HOST}.`,
  );
  const real = realServerArgs();
  const database = await createScratchDatabase();
  scratch = database;
  atCleanup(() => database.drop());
  const databaseUrl = database.url;
  console.log(`Real server: ${real.how}; PostgreSQL database ${scratch.name} on ${new URL(SERVER_URL).host}.`);
  console.log('');

  const rows: Measurement[] = [];

  // (a) baseline
  const helloPort = await freePort();
  const hello = startChild('hello-express', tsxArgs('scripts/bench/hello-express.ts'), { PORT: String(helloPort), NODE_ENV: 'production' });
  await waitUntilUp(hello, `http://${HOST}:${helloPort}/`);
  const baseline = await load('baseline: bare Express 5 GET /', `http://${HOST}:${helloPort}/`, {}, hello);
  rows.push(baseline);
  await stopChild(hello);

  // (b) the real server on PostgreSQL
  const env = {
    NODE_ENV: 'production',
    DATABASE_URL: databaseUrl,
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    RATE_LIMIT_REQUESTS: RATE_LIMIT,
    VALIDATE_RESPONSES: 'off',
    // Production does not bootstrap by itself; the bench needs the organization and token it prints.
    AUTO_BOOTSTRAP: 'true',
  };
  const server = await startRealServer(real.args, env);
  const boot = JSON.parse(await waitForFile(join(server.dataDir, 'bootstrap.json'), server.child)) as {
    base_url: string;
    organization_id: string;
    api_token: string;
  };
  const auth = { Authorization: `Bearer ${boot.api_token}`, 'X-Organization-Id': boot.organization_id };
  const destinationId = await createBenchDestination(server.baseUrl, auth);
  const readUrl = `${server.baseUrl}/notification-destination/${destinationId}`;
  const check = await fetch(readUrl, { headers: auth, signal: AbortSignal.timeout(10_000) });
  await check.arrayBuffer();
  if (check.status !== 200) throw new Error(`GET ${readUrl} answered ${check.status} before the benchmark.`);

  const health = await load('real: GET /health', `${server.baseUrl}/health`, {}, server.child);
  rows.push(health);
  const read = await load('real: GET /notification-destination/{id} (token)', readUrl, auth, server.child);
  rows.push(read);

  // List pages: the first page and one from the middle (keyset cursor), at 1,000 rows and at 100,000.
  const listUrl = `${server.baseUrl}/notification-destination?limit=50`;
  const lists: Record<string, Measurement> = {};
  let seeded = 1;
  for (const size of LIST_SIZES) {
    seeded += await seedDestinations(databaseUrl, destinationId, size - seeded, seeded);
    const middle = await onDatabase(databaseUrl, (c) =>
      c.query<{ id: string }>('select id from notification_destinations order by id offset $1 limit 1', [Math.floor(size / 2)]),
    );
    const first = await load(`real: list page 1 at ${size.toLocaleString('en')} rows`, listUrl, auth, server.child);
    const deep = await load(
      `real: list page ${size / 100 + 1} at ${size.toLocaleString('en')} rows`,
      `${listUrl}&cursor=${cursorAfter(middle.rows[0]!.id)}`,
      auth,
      server.child,
    );
    rows.push(first, deep);
    lists[size] = first;
    lists[`${size} deep`] = deep;
  }
  // Another organization, made after those rows, with a table of its own on top of them: its
  // page must not walk the first organization's rows (nor sort all of its own).
  const tenant = await openDatabase({ url: databaseUrl, poolSize: 1 });
  const other = await new Factories(tenant.db).org().finally(() => tenant.close());
  const otherAuth = { Authorization: `Bearer ${other.token}`, 'X-Organization-Id': other.orgId };
  const otherDestinationId = await createBenchDestination(server.baseUrl, otherAuth);
  await seedDestinations(databaseUrl, otherDestinationId, OTHER_TENANT_ROWS - 1, 1);
  const otherList = await load(`real: list page 1, a later org of ${OTHER_TENANT_ROWS.toLocaleString('en')} rows`, listUrl, otherAuth, server.child);
  rows.push(otherList);
  lists['other tenant'] = otherList;
  await stopChild(server.child);

  // The floor: bare Express reading the same row with pg, nothing else.
  const floorPort = await freePort();
  const floor = startChild('hello-express+pg', tsxArgs('scripts/bench/hello-express.ts'), {
    PORT: String(floorPort),
    NODE_ENV: 'production',
    DATABASE_URL: databaseUrl,
  });
  await waitUntilUp(floor, `http://${HOST}:${floorPort}/`);
  const floorUrl = `http://${HOST}:${floorPort}/notification-destination/${boot.organization_id}/${destinationId}`;
  const floorRead = await load('floor: bare Express + pg, the same row', floorUrl, {}, floor);
  rows.push(floorRead);
  const floorList = await load(
    `floor: bare Express + pg, list page 1 at ${LIST_SIZES[LIST_SIZES.length - 1]!.toLocaleString('en')} rows`,
    `http://${HOST}:${floorPort}/notification-destination/${boot.organization_id}`,
    {},
    floor,
  );
  rows.push(floorList);
  const floorJsonList = await load(
    `floor: bare Express + pg, that page as JSON PostgreSQL builds`,
    `http://${HOST}:${floorPort}/notification-destination-json/${boot.organization_id}`,
    {},
    floor,
  );
  rows.push(floorJsonList);
  await stopChild(floor);

  const router = routerTimes();
  if (server.child.exitCode !== 0) console.log(`(the real server exited with code ${server.child.exitCode} on SIGTERM)`);

  const diagnostics: string[] = [];
  if (DIAGNOSE) {
    const readPath = `/notification-destination/${destinationId}`;
    // The same requests with the logs off: what the log line per request costs.
    const silent = await startRealServer(real.args, env, { LOG_LEVEL: 'silent', AUTO_BOOTSTRAP: 'false' });
    rows.push(await load('diag: token read, LOG_LEVEL=silent', `${silent.baseUrl}${readPath}`, auth, silent.child));
    rows.push(await load('diag: /health, LOG_LEVEL=silent', `${silent.baseUrl}/health`, {}, silent.child));
    await stopChild(silent.child);
    // Profiles (--cpu-prof) of the baseline and of the real server at the production log level.
    const profiles: string[] = [];
    const helloProfileDir = tempDir('cp-bench-prof-');
    const helloProfiled = startChild('hello-express', ['--cpu-prof', `--cpu-prof-dir=${helloProfileDir}`, ...tsxArgs('scripts/bench/hello-express.ts')], {
      PORT: String(helloPort),
      NODE_ENV: 'production',
    });
    await waitUntilUp(helloProfiled, `http://${HOST}:${helloPort}/`);
    const profiledBaseline = await load('diag: baseline, under --cpu-prof', `http://${HOST}:${helloPort}/`, {}, helloProfiled);
    rows.push(profiledBaseline);
    await stopChild(helloProfiled);
    const helloProfile = readProfile(helloProfileDir);
    keepProfiles(helloProfileDir, 'baseline');
    if (helloProfile) profiles.push(...summariseProfile(helloProfile, profiledBaseline.window, 'baseline'));

    const profileDir = tempDir('cp-bench-prof-');
    const profiled = await startRealServer(real.args, env, { AUTO_BOOTSTRAP: 'false' }, ['--cpu-prof', `--cpu-prof-dir=${profileDir}`]);
    const profiledHealth = await load('diag: /health, under --cpu-prof', `${profiled.baseUrl}/health`, {}, profiled.child);
    const profiledRead = await load('diag: token read, under --cpu-prof', `${profiled.baseUrl}${readPath}`, auth, profiled.child);
    const profiledList = await load(`diag: list page 1, under --cpu-prof`, `${profiled.baseUrl}/notification-destination?limit=50`, auth, profiled.child);
    rows.push(profiledHealth, profiledRead, profiledList);
    await stopChild(profiled.child);
    const profile = readProfile(profileDir);
    keepProfiles(profileDir, 'real');
    if (profile)
      profiles.push(
        ...summariseProfile(profile, profiledHealth.window, 'real /health'),
        ...summariseProfile(profile, profiledRead.window, 'real token read'),
        ...summariseProfile(profile, profiledList.window, 'real list page 1 (50 items)'),
      );

    const cores = (v: number | null) => (v === null ? 'n/a' : v.toFixed(2));
    const perRequest = (v: number | null, rps: number) => (v === null || rps === 0 ? 'n/a' : ((1000 * v) / rps).toFixed(3));
    diagnostics.push(
      'CPU while measuring (cores busy on average, and CPU ms per request; postgres = the backends serving the benchmark database):',
      ...rows.map(
        (r) =>
          `  ${r.target.padEnd(50)} server ${cores(r.cpu.server)} (${perRequest(r.cpu.server, r.rps)} ms/req)  postgres ${cores(r.cpu.postgres)} (${perRequest(r.cpu.postgres, r.rps)} ms/req)  load generator ${cores(r.cpu.loadGenerator)}`,
      ),
      '',
      'Profiles (--cpu-prof):',
      ...profiles,
    );
  }

  printTable(rows, baseline.rps);
  console.log('');
  console.log('');
  console.log(`Router (in this process, ${router.rounds} alternating rounds of ${router.lookups.toLocaleString('en')} lookups of GET ${router.path}):`);
  console.log(
    `  ${router.full.operations} operations: ${fmt(router.full.ns, 0)} ns per lookup; ${router.small.operations} operations: ${fmt(router.small.ns, 0)} ns per lookup`,
  );
  console.log('');
  const [small, large] = LIST_SIZES;
  const slowest = Object.values(lists).reduce((a, b) => (b.rps < a.rps ? b : a));
  const goals = [
    { name: 'authenticated read ≥ 0.5× baseline', ratio: read.rps / baseline.rps, need: 0.5, atLeast: true },
    {
      name: 'list pages ≥ 0.3× baseline (the slowest of them)',
      ratio: slowest.rps / baseline.rps,
      need: 0.3,
      atLeast: true,
    },
    { name: '/health ≥ 0.8× baseline', ratio: health.rps / baseline.rps, need: 0.8, atLeast: true },
    { name: 'p99 < 5× p50 (authenticated read)', ratio: read.p99 / Math.max(read.p50, 1), need: 5, atLeast: false },
    { name: `list page 1: ${large / 1000}k rows vs ${small / 1000}k ≤ 1.2× time`, ratio: lists[small]!.rps / lists[large]!.rps, need: 1.2, atLeast: false },
    {
      name: `list middle page: ${large / 1000}k vs ${small / 1000}k ≤ 1.2× time`,
      ratio: lists[`${small} deep`]!.rps / lists[`${large} deep`]!.rps,
      need: 1.2,
      atLeast: false,
    },
    {
      name: `list page 1: a later org's ${OTHER_TENANT_ROWS / 1000}k rows vs ${small / 1000}k ≤ 1.2× time`,
      ratio: lists[small]!.rps / lists['other tenant']!.rps,
      need: 1.2,
      atLeast: false,
    },
    {
      name: `router: ${router.full.operations} vs ${router.small.operations} operations ≤ 1.1× time`,
      ratio: router.full.ns / router.small.ns,
      need: 1.1,
      atLeast: false,
    },
  ];
  console.log('Goals:');
  for (const g of goals) {
    const pass = g.atLeast ? g.ratio >= g.need : g.ratio <= g.need;
    console.log(`  ${g.name.padEnd(60)} ${fmt(g.ratio, 2).padStart(5)}×  (goal ${g.atLeast ? '≥' : '≤'} ${g.need})  ${pass ? 'PASS' : 'FAIL'}`);
  }
  console.log(
    `  (the floor, bare Express + pg reading the same row, ran at ${fmt(floorRead.rps / baseline.rps, 2)}× baseline: the most any server doing one query per read can reach here;`,
  );
  console.log(
    `   the authenticated read ran at ${fmt(read.rps / floorRead.rps, 2)}× the floor, the slowest list page (${slowest.target.replace(/^real: /, '')}) at ${fmt(slowest.rps / read.rps, 2)}× the read;`,
  );
  console.log(
    `   bare Express + pg sending a page of the same 50 rows ran at ${fmt(floorList.rps / baseline.rps, 2)}× baseline, the slowest list page at ${fmt(slowest.rps / floorList.rps, 2)}× that floor;`,
  );
  console.log(
    `   the same page as JSON built by PostgreSQL (json_agg, no row parsed in Node) at ${fmt(floorJsonList.rps / baseline.rps, 2)}× baseline: what lists could reach with serialization in SQL)`,
  );
  if (rows.some((r) => r.non2xx > 0 || r.errors > 0)) console.log('Warning: some requests failed (non-2xx or errors); the figures above include them.');
  if (diagnostics.length > 0) console.log(['', ...diagnostics].join('\n'));
}

void main()
  .then(
    () => 0,
    (err) => {
      process.stderr.write(`Benchmark failed: ${err instanceof Error ? err.stack : String(err)}\n`);
      return 1;
    },
  )
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  });
