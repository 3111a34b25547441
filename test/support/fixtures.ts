import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { TestApp } from './app';
import type { SeededOrg } from './factories';

/**
 * Makes one resource in an organization and returns the value its path parameter takes (an
 * id, a slug). Keyed by the path parameter's schema name in the spec (`NotificationDestinationId`).
 * Each area's tests bring theirs in test/fixtures/<area>.ts; the table-driven test over every
 * operation uses them to prove that another organization's resource is a 404.
 */
export type FixtureCreator = (t: TestApp, org: SeededOrg) => Promise<string>;
export type FixtureCreators = Record<string, FixtureCreator>;

export function loadFixtureCreators(dir = join(__dirname, '..', 'fixtures')): FixtureCreators {
  const creators: FixtureCreators = {};
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .sort()) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const module = require(join(dir, file)) as { creators?: FixtureCreators };
    for (const [schema, create] of Object.entries(module.creators ?? {})) {
      if (creators[schema]) throw new Error(`test/fixtures/${file}: ${schema} has a creator already.`);
      creators[schema] = create;
    }
  }
  return creators;
}
