#!/usr/bin/env node
// Runs Jest and ends with the plain line CI reads: "N passed, N failed".
// PGlite needs --experimental-vm-modules under Jest (toolchain.md §0).
const { spawnSync } = require('node:child_process');
const { mkdirSync, readFileSync, rmSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const results = join(root, '.test-results', `jest-${process.pid}.json`);
mkdirSync(join(root, '.test-results'), { recursive: true });
rmSync(results, { force: true });

const nodeOptions = [process.env.NODE_OPTIONS, '--experimental-vm-modules', '--no-warnings=ExperimentalWarning'].filter(Boolean).join(' ');
const run = spawnSync(
  process.execPath,
  [require.resolve('jest/bin/jest'), '--json', `--outputFile=${results}`, ...process.argv.slice(2)],
  { cwd: root, stdio: 'inherit', env: { ...process.env, NODE_OPTIONS: nodeOptions } },
);

let passed = 0;
let failed = 0;
let skipped = 0;
try {
  const summary = JSON.parse(readFileSync(results, 'utf8'));
  passed = summary.numPassedTests;
  failed = summary.numFailedTests + summary.numRuntimeErrorTestSuites;
  skipped = summary.numPendingTests + summary.numTodoTests;
} catch {
  failed = Math.max(1, failed);
} finally {
  rmSync(results, { force: true });
}
const database = process.env.TEST_DATABASE_URL ? 'PostgreSQL server' : 'embedded PostgreSQL';
console.log(`\nTests on ${database}:`);
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(run.status === 0 && failed === 0 ? 0 : 1);
