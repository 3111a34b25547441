// `npm run coverage`: how much of the contract is built, per tag, in the spec's tag order.
// Built: an area has a handler for it, or it is served by an engine an area mounts
// (x-engine). Everything else answers 501 not_implemented and does not count.
import { operations } from '../generated/operations';
import { serviceRegistry } from '../src/modules';
import { loadSpec } from '../src/spec';

const spec = loadSpec();
const pending = serviceRegistry().notImplemented;
const tags = (spec.tags as { name: string }[]).map((t) => t.name);
const rows = tags.map((tag) => {
  const ids = Object.entries(operations)
    .filter(([, meta]) => meta.tag === tag)
    .map(([id]) => id);
  const built = ids.filter((id) => !pending.has(id));
  return { tag, built: built.length, total: ids.length, missing: ids.filter((id) => pending.has(id)) };
});

const json = process.argv.includes('--json');
const total = rows.reduce((n, r) => n + r.total, 0);
const built = rows.reduce((n, r) => n + r.built, 0);
if (json) {
  process.stdout.write(`${JSON.stringify({ implemented: built, total, tags: rows }, null, 2)}\n`);
} else {
  const width = Math.max(...tags.map((t) => t.length));
  for (const r of rows) {
    const bar = r.total === 0 ? '' : '#'.repeat(Math.round((20 * r.built) / r.total)).padEnd(20, '.');
    process.stdout.write(`${r.tag.padEnd(width)}  ${String(r.built).padStart(3)} / ${String(r.total).padEnd(3)}  ${bar}\n`);
  }
  process.stdout.write(
    `${'Total'.padEnd(width)}  ${String(built).padStart(3)} / ${String(total).padEnd(3)}  (${Math.round((100 * built) / total)}% implemented; the rest answer 501 not_implemented)\n`,
  );
  if (process.argv.includes('--missing')) {
    for (const r of rows.filter((x) => x.missing.length > 0)) process.stdout.write(`\n${r.tag}: ${r.missing.join(', ')}\n`);
  }
}
