import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Area } from '../http/area';
import { buildRegistry, type Registry } from '../http/registry';
import { loadSpec } from '../spec';
import { describeOperations } from '../spec/operations';

/**
 * Every area, found by its folder: `src/areas/<folder>/<folder>.area.ts` default-exports
 * `defineArea(…)`. Adding an area adds a folder; no list here or elsewhere names it. Works
 * from the TypeScript sources (tsx, Jest) and from the compiled build alike.
 */
export function loadAreas(dir: string = __dirname): Area[] {
  const areas: Area[] = [];
  for (const folder of readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name).sort()) {
    const file = ['.ts', '.js'].map((ext) => join(dir, folder, `${folder}.area${ext}`)).find((f) => existsSync(f));
    if (!file) continue;
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const area = (require(file) as { default?: Area }).default;
    if (!area || typeof area !== 'object' || typeof area.tag !== 'string') {
      throw new Error(`${file} must default-export defineArea({ tag, handlers, … }).`);
    }
    areas.push(area);
  }
  return areas;
}

/** The service's own areas against its own spec: what is built, what answers 501. */
export function serviceRegistry(): Registry {
  const spec = loadSpec();
  return buildRegistry(loadAreas(), describeOperations(spec).operations, Object.keys(spec.components.securitySchemes ?? {}));
}
