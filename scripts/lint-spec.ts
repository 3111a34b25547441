// `make lint`: Redocly's rules (redocly.yaml) on the assembled spec, reported against the
// files in spec/. Fails on any error or warning.
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { assembleSpec } from './spec-assembly';

const root = resolve(__dirname, '..');
// Node 20 end-of-life banners Redocly prints on every run; nothing to act on here.
const NOISE = /Node\.js 20|nodejs\.org|Update Node|Future Redocly|You are using|reached end-of-life|^\s*║\s*║\s*$|╔|╚/;

const assembled = assembleSpec();
try {
  const run = spawnSync(
    process.execPath,
    [require.resolve('@redocly/cli/bin/cli.js'), 'lint', assembled.root, '--config', join(root, 'redocly.yaml'), '--format', 'stylish'],
    { cwd: assembled.dir, encoding: 'utf8', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } },
  );
  const output = `${run.stdout}${run.stderr}`
    .split('\n')
    .filter((line) => !NOISE.test(line))
    // Redocly names files relative to the assembled copy; name them as they are in spec/.
    .map((line) => line.replace(/^(\S+\.ya?ml)(?=[: ])/, 'spec/$1').replace(/(validating|^) ?(\S+\.ya?ml)\.\.\./, '$1 spec/$2...'))
    .join('\n');
  process.stdout.write(output.endsWith('\n') ? output : `${output}\n`);
  // Zero warnings too: a warning left in today hides the next one.
  const warned = /You have \d+ warnings?/.test(output);
  process.exitCode = run.status || (warned ? 1 : 0);
} finally {
  assembled.cleanup();
}
