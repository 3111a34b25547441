import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '@jest/types';
import { operations } from '../../generated/operations';
import { serviceRegistry } from '../../src/modules';
import { RUN_ENV, SCRATCH_PREFIX, onServer, scratchRoot, serverUrl, templateName } from './database';
import { takeEventsSeen } from './events-seen';

/**
 * After a run of the whole suite: every event a built operation declares in x-events must
 * have been seen emitted by some test. A partial run (a file, a pattern) proves too little
 * to judge, so it only cleans up.
 */
function checkEventsSeen(globalConfig: Config.GlobalConfig): void {
  const seen = takeEventsSeen();
  const partial = globalConfig.testPathPatterns.isSet() || !!globalConfig.testNamePattern || globalConfig.onlyChanged || process.env.SKIP_EVENT_CHECK === '1';
  if (partial) return;
  const { notImplemented } = serviceRegistry();
  const unseen = Object.entries(operations)
    .filter(([id]) => !notImplemented.has(id))
    .flatMap(([id, meta]) => meta.events.map((type) => `${id} ${type}`))
    .filter((pair) => !seen.has(pair));
  if (unseen.length > 0) {
    throw new Error(`No test saw these declared events emitted (operation, event): ${unseen.join('; ')}. Test them, or take them out of x-events.`);
  }
}

export default async function globalTeardown(globalConfig: Config.GlobalConfig): Promise<void> {
  const template = templateName();
  const url = serverUrl();
  try {
    checkEventsSeen(globalConfig);
  } finally {
    // Copies of the template a test file left open (a file that did not close its app).
    const mine = `${SCRATCH_PREFIX}${process.env[RUN_ENV]}-`;
    for (const name of readdirSync(scratchRoot())) if (name.startsWith(mine)) rmSync(join(scratchRoot(), name), { recursive: true, force: true });
    // An embedded template stays for later runs (global setup reuses it while its key matches; make clean removes it).
    if (url) await onServer(url, (admin) => admin.query(`drop database if exists ${template} with (force)`));
  }
}
