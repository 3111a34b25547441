// Proof that each layering rule of eslint.config.mjs fires: lints small files that exist only
// here (ESLint's lintText with a path; nothing is written) and checks each import is refused or
// let through as the LAYERS table says. A rule that stopped matching (a moved folder, a typo in a
// pattern, a plugin upgrade) fails `make lint` here instead of passing silently.
import { ESLint } from 'eslint';
import { boundariesConfig, forbiddenPackages } from '../eslint.config.mjs';

// [file that imports, what it imports, refused?]. Imports name files that exist today.
const CASES = [
  ['src/lib/new.ts', '../lib/crypto', false],
  ['src/lib/new.ts', '../db/database', true],
  ['src/lib/new.ts', '../identity/credentials', true],
  ['src/db/new.ts', '../lib/crypto', false],
  ['src/db/new.ts', '../http/errors', true],
  ['src/db/new.ts', 'express', true],
  ['src/db/new.ts', '../areas/connectors/connectors.repo', true],
  ['src/outbound/new.ts', '../lib/crypto', false],
  ['src/outbound/new.ts', '../db/database', true],
  ['src/protocols/oauth-client/new.ts', '../../outbound/client', false],
  ['src/protocols/oauth-client/new.ts', '../../http/errors', false],
  ['src/protocols/oauth-client/new.ts', '../../areas/connectors/connectors.repo', true],
  ['src/protocols/oauth-client/new.ts', '../../mcp/endpoint/jsonrpc', true],
  ['src/access/policy/evaluate.ts', '../../lib/crypto', false],
  ['src/access/policy/evaluate.ts', '../../../generated/openapi', false],
  ['src/access/policy/evaluate.ts', '../../db/database', true],
  ['src/access/policy/evaluate.ts', '../../http/errors', true],
  ['src/identity/new.ts', '../db/database', false],
  ['src/identity/new.ts', '../areas/members/members.service', true],
  ['src/identity/new.ts', '../mcp/endpoint/jsonrpc', true],
  ['src/access/new.ts', '../identity/credentials', false],
  ['src/access/new.ts', '../areas/toolboxes', true],
  ['src/http/new.ts', '../identity/credentials', false],
  ['src/http/new.ts', '../areas/connectors/connectors.repo', true],
  ['src/http/new.ts', '../areas/toolboxes', true],
  ['src/http/new.ts', '../mcp/endpoint/jsonrpc', true],
  ['src/events/new.ts', '../db/database', false],
  ['src/events/new.ts', '../identity/credentials', true],
  ['src/events/new.ts', '../http/errors', true],
  ['src/events/new.ts', 'type:../http/errors', false],
  ['src/mcp/new.ts', '../areas/toolboxes', false],
  ['src/mcp/new.ts', '../areas/toolboxes/index', false],
  ['src/mcp/new.ts', '../areas/toolboxes/toolboxes.repo', true],
  ['src/areas/new-area/new-area.service.ts', './new-area.repo', false],
  ['src/areas/new-area/new-area.service.ts', '../toolboxes', false],
  ['src/areas/new-area/new-area.service.ts', '../toolboxes/toolboxes.repo', true],
  ['src/areas/new-area/new-area.service.ts', '../../mcp/endpoint/jsonrpc', false],
  ['src/areas/new-area/new-area.service.ts', '../../http/errors', false],
  ['src/app.ts', './areas/toolboxes/toolboxes.repo', false],
  ['generated/new.ts', '../src/lib/crypto', true],
  ['generated/modules.ts', '../src/areas/toolboxes/toolboxes.area', false],
  ['src/access/policy/evaluate.ts', './glob', false],
  ['src/access/policy/load.ts', '../../db/database', false],
  ['test/new.test.ts', '../src/areas/toolboxes/toolboxes.repo', false],
];

const verbose = process.argv.includes('-v');
const eslint = new ESLint({ overrideConfigFile: true, overrideConfig: [boundariesConfig, ...forbiddenPackages] });
let failed = 0;
for (const [file, target, refused] of CASES) {
  const typeOnly = target.startsWith('type:');
  const source = typeOnly ? target.slice(5) : target;
  const code = typeOnly ? `import type { X } from '${source}';\nexport type Y = X;\n` : `import * as m from '${source}';\nexport { m };\n`;
  const [result] = await eslint.lintText(code, { filePath: file });
  const refusals = result.messages.filter((m) => m.ruleId === 'boundaries/dependencies' || m.ruleId === 'no-restricted-imports');
  const other = result.messages.filter((m) => !refusals.includes(m));
  const ok = refusals.length > 0 === refused && other.length === 0;
  if (!ok) failed++;
  if (!ok || verbose)
    console.log(
      `${ok ? 'ok  ' : 'FAIL'} ${file} ${refused ? '✗' : '→'} ${target}${ok ? '' : `: ${result.messages.map((m) => m.message).join('; ') || 'no message'}`}`,
    );
}
// A file in src/ that no layer holds.
const [unknown] = await eslint.lintText('export {};\n', { filePath: 'src/stray.ts' });
const strayOk = unknown.messages.some((m) => m.ruleId === 'boundaries/no-unknown-files');
if (!strayOk) failed++;
if (!strayOk || verbose) console.log(`${strayOk ? 'ok  ' : 'FAIL'} src/stray.ts belongs to no layer`);
console.log(
  failed
    ? `layering rules: ${failed} of ${CASES.length + 1} cases did not go as LAYERS in eslint.config.mjs says`
    : `layering rules: all ${CASES.length + 1} cases go as LAYERS says (-v lists them)`,
);
process.exit(failed ? 1 : 0);
