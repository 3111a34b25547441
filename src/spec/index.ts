import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The project root: the nearest folder above this file with a package.json (works from src/ and dist/). */
export const projectRoot: string = (() => {
  let dir = __dirname;
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('Cannot find the project root (package.json).');
    dir = parent;
  }
  return dir;
})();

export type OpenApiDocument = {
  openapi: string;
  info: Record<string, unknown>;
  servers?: { url: string; description?: string; variables?: unknown }[];
  paths: Record<string, Record<string, any>>;
  components: { schemas: Record<string, any>; [key: string]: any };
  [key: string]: unknown;
};

let cached: OpenApiDocument | null = null;

/** The bundled document from generated/ (written by `make generate`). Read once. */
export function loadSpec(): OpenApiDocument {
  cached ??= JSON.parse(readFileSync(join(projectRoot, 'generated', 'openapi.json'), 'utf8')) as OpenApiDocument;
  return cached;
}
