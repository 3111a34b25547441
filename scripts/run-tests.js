#!/usr/bin/env node
// Runs Jest and ends with the plain line CI reads: "N passed, N failed".
//   node scripts/run-tests.js               the whole suite on the embedded database, then the
//                                           database-sensitive tests (test/integration, test/db)
//                                           again on the PostgreSQL server at
//                                           postgres://postgres@127.0.0.1:5432/postgres when one answers
//   node scripts/run-tests.js <paths…>      those tests, on the embedded database
//   TEST_DATABASE_URL=… run-tests.js [paths] those tests (or all) on that server only
// PGlite needs --experimental-vm-modules under Jest (toolchain.md §0).
const { spawnSync } = require('node:child_process');
const { mkdirSync, readFileSync, rmSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const DEFAULT_SERVER = 'postgres://postgres@127.0.0.1:5432/postgres';
const DATABASE_SENSITIVE = ['test/integration', 'test/db'];
// Of those, files that touch nothing a database decides, so one run (embedded) proves them:
//   not-implemented  every unbuilt operation answers 501 before the guard reads anything
//   upstream-peers   the loopback MCP/OAuth peers themselves; no app, no database
//   health-schema    /health, the served spec and docs, and the drain's 503
const EMBEDDED_ONLY = ['test/integration/not-implemented\\.test', 'test/integration/upstream-peers\\.test', 'test/integration/health-schema\\.test'];

function duration(ms) {
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s} s`;
}

function jest(args, databaseUrl) {
  const started = Date.now();
  const results = join(root, '.test-results', `jest-${process.pid}-${Date.now()}.json`);
  mkdirSync(join(root, '.test-results'), { recursive: true });
  const env = {
    ...process.env,
    NODE_OPTIONS: [process.env.NODE_OPTIONS, '--experimental-vm-modules', '--no-warnings=ExperimentalWarning'].filter(Boolean).join(' '),
  };
  delete env.TEST_DATABASE_URL;
  if (databaseUrl) env.TEST_DATABASE_URL = databaseUrl;
  const run = spawnSync(process.execPath, [require.resolve('jest/bin/jest'), '--json', `--outputFile=${results}`, ...args], {
    cwd: root,
    stdio: 'inherit',
    env,
  });
  const counts = { passed: 0, failed: 0, skipped: 0 };
  try {
    const summary = JSON.parse(readFileSync(results, 'utf8'));
    counts.passed = summary.numPassedTests;
    counts.failed = summary.numFailedTests + summary.numRuntimeErrorTestSuites;
    counts.skipped = summary.numPendingTests + summary.numTodoTests;
  } catch {
    // No summary: Jest itself failed.
  } finally {
    rmSync(results, { force: true });
  }
  // A failure outside any test (global setup or teardown, say) still fails the run.
  if (run.status !== 0 && counts.failed === 0) counts.failed = 1;
  counts.ms = Date.now() - started;
  console.log(
    `\nTests on ${databaseUrl ? 'the PostgreSQL server' : 'embedded PostgreSQL'}${args.length ? ` (${args.join(' ')})` : ''}, in ${duration(counts.ms)}:`,
  );
  console.log(line(counts));
  return counts;
}

function line({ passed, failed, skipped }) {
  return `${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`;
}

function serverAnswers(url) {
  const probe = spawnSync(
    process.execPath,
    [
      '-e',
      `
    const c = new (require('pg').Client)({ connectionString: process.argv[1], connectionTimeoutMillis: 3000 });
    c.connect().then(() => c.end()).then(() => process.exit(0), () => process.exit(1));`,
      url,
    ],
    { cwd: root },
  );
  return probe.status === 0;
}

const started = Date.now();
const args = process.argv.slice(2);
const runs = [];
if (process.env.TEST_DATABASE_URL) {
  runs.push(jest(args, process.env.TEST_DATABASE_URL));
} else if (args.some((a) => !a.startsWith('-'))) {
  runs.push(jest(args, null));
} else {
  runs.push(jest(args, null));
  if (serverAnswers(DEFAULT_SERVER))
    runs.push(jest([...args, ...DATABASE_SENSITIVE, '--testPathIgnorePatterns', '/node_modules/', ...EMBEDDED_ONLY], DEFAULT_SERVER));
  else console.log(`\nNo PostgreSQL server answers at ${DEFAULT_SERVER}; the database-sensitive tests ran on the embedded database only.`);
}
const total = runs.reduce((sum, r) => ({ passed: sum.passed + r.passed, failed: sum.failed + r.failed, skipped: sum.skipped + r.skipped }), {
  passed: 0,
  failed: 0,
  skipped: 0,
});
// The last line stays the counts CI reads.
console.log(`\nSuite finished in ${duration(Date.now() - started)}${runs.length > 1 ? ` (${runs.map((r) => duration(r.ms)).join(' + ')})` : ''}.`);
console.log(`${runs.length > 1 ? 'All runs:\n' : ''}${line(total)}`);
process.exit(total.failed === 0 ? 0 : 1);
