import { appendFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { RUN_ENV, TEMPLATE_DIR, TEMPLATE_ENV } from './database';

/**
 * Which operation emitted which event, across every worker of one test run: each pair is
 * appended once to a file named after the run, and global teardown compares them with the
 * x-events the spec declares.
 */
const seen = new Set<string>();
const file = () => join(TEMPLATE_DIR, `events-seen-${basename(process.env[RUN_ENV] ?? process.env[TEMPLATE_ENV] ?? 'run')}.jsonl`);

export function recordEvent(operationId: string, type: string): void {
  const key = `${operationId} ${type}`;
  if (seen.has(key)) return;
  seen.add(key);
  appendFileSync(file(), `${JSON.stringify({ operationId, type })}\n`);
}

/** Every pair recorded in this run; the file is removed. */
export function takeEventsSeen(): Set<string> {
  const path = file();
  if (!existsSync(path)) return new Set();
  const pairs = readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const { operationId, type } = JSON.parse(line) as { operationId: string; type: string };
      return `${operationId} ${type}`;
    });
  rmSync(path, { force: true });
  return new Set(pairs);
}
