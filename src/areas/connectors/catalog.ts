import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import YAML from 'yaml';
import type { Executor } from '../../db/database';
import { loadSpec } from '../../spec';
import {
  storedAuth,
  storedDocumentation,
  storedTool,
  sameContent,
  type AuthInput,
  type ConnectorContent,
  type DocumentationInput,
  type ToolInput,
} from './content';
import { contentProblems } from './rules';

/**
 * The built-in connector catalog: reviewed data in the repository, one `<slug>.yml` per
 * connector in CATALOG_DIR, loaded and checked at start (a bad file stops the start, naming
 * the file and the JSON pointer), versioned like custom connectors: every version a database
 * has seen stays in `catalog_versions`, so forks of built-ins always find their base.
 */
export interface CatalogEntry {
  slug: string;
  version: number;
  /** The version's release date (YYYY-MM-DD). */
  released: string;
  /** When endpoint, transport and auth were last checked against the vendor's documentation. */
  checked: string;
  /** The vendor page the facts come from. */
  docs_url: string;
  content: ConnectorContent;
  /** The release date of the first version this database has seen (version 1 normally). */
  createdAt: Date;
  /** The release date of the current version. */
  updatedAt: Date;
}

export interface Catalog {
  dir: string;
  /** By slug, in slug order. */
  entries: ReadonlyMap<string, CatalogEntry>;
}

export class CatalogError extends Error {
  override readonly name = 'CatalogError';
}

interface CatalogFile {
  slug: string;
  version: number;
  released: string;
  checked: string;
  docs_url: string;
  name: string;
  description?: string | null;
  icon_url?: string | null;
  mcp_url: string;
  transport: ConnectorContent['transport'];
  auth: AuthInput;
  tools?: ToolInput[];
  documentation?: DocumentationInput[];
}

const ref = (name: string) => ({ $ref: `spec#/components/schemas/${name}` });
const DATE = { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}$', format: 'date' };

/** A catalog file's shape, built from the spec's own schemas. */
const FILE_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['slug', 'version', 'released', 'checked', 'docs_url', 'name', 'mcp_url', 'transport', 'auth'],
  properties: {
    slug: ref('ConnectorSlug'),
    version: ref('ConnectorVersion'),
    released: DATE,
    checked: DATE,
    docs_url: { type: 'string', format: 'uri', pattern: '^https://' },
    name: ref('ConnectorName'),
    description: ref('ConnectorDescription'),
    icon_url: ref('ConnectorIconUrl'),
    mcp_url: ref('ConnectorMcpUrl'),
    transport: ref('ConnectorTransport'),
    auth: ref('ConnectorAuthInput'),
    tools: ref('ConnectorToolInputList'),
    documentation: { type: 'array', maxItems: 200, items: ref('ConnectorDocumentationEntryInput') },
  },
};

type FileValidator = ((value: unknown) => boolean) & {
  errors?: { instancePath: string; message?: string; params: Record<string, unknown>; keyword: string }[] | null;
};
let validator: FileValidator | null = null;

function fileValidator() {
  if (validator) return validator;
  const schemas = structuredClone(loadSpec().components.schemas) as Record<string, Record<string, unknown>>;
  // Ajv does not take discriminator mappings; the branches' enums say the same.
  const strip = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(strip);
    if (!node || typeof node !== 'object') return;
    const record = node as Record<string, any>;
    if (record.discriminator) delete record.discriminator;
    for (const value of Object.values(record)) strip(value);
  };
  strip(schemas);
  const ajv = new Ajv2020({ strict: false, allErrors: true, logger: false });
  addFormats(ajv);
  ajv.addSchema({ $id: 'spec', components: { schemas } });
  const compiled = ajv.compile(FILE_SCHEMA) as unknown as FileValidator;
  validator = compiled;
  return compiled;
}

const at = (date: string) => new Date(`${date}T00:00:00.000Z`);

/** The content a catalog file declares, with the defaults filled in. */
function contentOf(file: CatalogFile): ConnectorContent {
  const updated = at(file.released).toISOString();
  return {
    name: file.name,
    description: file.description ?? null,
    icon_url: file.icon_url ?? null,
    mcp_url: file.mcp_url,
    transport: file.transport,
    auth: storedAuth(file.auth),
    tools: (file.tools ?? []).map(storedTool),
    documentation: (file.documentation ?? []).map((entry) => storedDocumentation(entry, updated)),
  };
}

/** Reads and checks one catalog file; the problems name the file and a JSON pointer. */
function readFile(path: string): { entry: CatalogEntry | null; problems: string[] } {
  const name = basename(path);
  const problems: string[] = [];
  let data: unknown;
  try {
    const doc = YAML.parseDocument(readFileSync(path, 'utf8'), { prettyErrors: true });
    if (doc.errors.length > 0) return { entry: null, problems: doc.errors.map((e) => `${name}: ${e.message}`) };
    data = doc.toJS();
  } catch (err) {
    return { entry: null, problems: [`${name}: ${(err as Error).message}`] };
  }
  const validate = fileValidator();
  if (!validate(data)) {
    for (const error of validate.errors ?? []) {
      if (error.keyword === 'oneOf' || error.keyword === 'anyOf') continue;
      const extra =
        error.keyword === 'additionalProperties'
          ? `/${String(error.params.additionalProperty)}`
          : error.keyword === 'required'
            ? `/${String(error.params.missingProperty)}`
            : '';
      problems.push(
        `${name}: ${error.instancePath}${extra || ''} ${error.keyword === 'additionalProperties' ? 'is not a known member' : error.keyword === 'required' ? 'is required' : error.message}`,
      );
    }
    return { entry: null, problems: [...new Set(problems)] };
  }
  const file = data as CatalogFile;
  if (`${file.slug}.yml` !== name) problems.push(`${name}: /slug is ${file.slug}; the file must be named ${file.slug}.yml`);
  if (file.auth.type === 'oauth2' && 'client_secret' in file.auth) {
    problems.push(`${name}: /auth/client_secret must not be in the repository; built-in connectors carry no secrets`);
  }
  const content = contentOf(file);
  // Built-ins are called from every deployment: public https only.
  const { invalid, refused } = contentProblems(content, { allowLoopback: false, allowPrivate: false });
  for (const p of [...invalid, ...refused]) problems.push(`${name}: ${p.pointer} ${p.message}`);
  if (problems.length > 0) return { entry: null, problems };
  const released = at(file.released);
  return {
    entry: {
      slug: file.slug,
      version: file.version,
      released: file.released,
      checked: file.checked,
      docs_url: file.docs_url,
      content,
      createdAt: released,
      updatedAt: released,
    },
    problems: [],
  };
}

/** Reads and checks every `*.yml` of the folder; throws CatalogError listing every problem. */
export function loadCatalog(dir: string): Catalog {
  if (!existsSync(dir)) throw new CatalogError(`The connector catalog folder ${dir} does not exist (CATALOG_DIR).`);
  const entries = new Map<string, CatalogEntry>();
  const problems: string[] = [];
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.yml') || f.endsWith('.yaml'))
    .sort()) {
    const read = readFile(join(dir, file));
    problems.push(...read.problems);
    if (read.entry) entries.set(read.entry.slug, read.entry);
  }
  if (problems.length > 0) throw new CatalogError(`The connector catalog in ${dir} has ${problems.length} problem(s):\n  ${problems.join('\n  ')}`);
  return { dir, entries: new Map([...entries].sort(([a], [b]) => (a < b ? -1 : 1))) };
}

/** What catalog_versions stores of a version: its content and release date. */
type StoredVersion = ConnectorContent & { released: string };

/**
 * Records every catalog version in `catalog_versions` (once: a version's content never
 * changes), and refuses a file whose content differs from what its version held before:
 * a change needs a new version, so that forks based on the old one keep their base. An older
 * file than the database has seen (a rolled-back deployment) is served as it is. Fills in
 * each entry's `createdAt` from the first version this database has seen.
 */
export async function syncCatalog(db: Executor, catalog: Catalog): Promise<void> {
  const entries = [...catalog.entries.values()];
  if (entries.length === 0) return;
  await db
    .insertInto('catalog_versions')
    .values(entries.map((e) => ({ slug: e.slug, version: e.version, content: JSON.stringify({ ...e.content, released: e.released } satisfies StoredVersion) })))
    .onConflict((oc) => oc.columns(['slug', 'version']).doNothing())
    .execute();
  const stored = await db
    .selectFrom('catalog_versions')
    .select(['slug', 'version', 'content'])
    .where(
      'slug',
      'in',
      entries.map((e) => e.slug),
    )
    .orderBy('slug')
    .orderBy('version')
    .execute();
  const problems: string[] = [];
  for (const entry of entries) {
    const versions = stored.filter((row) => row.slug === entry.slug);
    const same = versions.find((row) => row.version === entry.version);
    const content = same?.content as unknown as StoredVersion | undefined;
    if (content && (!sameContent(content, entry.content) || content.released !== entry.released)) {
      problems.push(`${entry.slug}.yml: version ${entry.version} was loaded before with other content; bump the version for a change`);
    }
    const first = versions[0]?.content as unknown as StoredVersion | undefined;
    if (first) entry.createdAt = at(first.released);
  }
  if (problems.length > 0) throw new CatalogError(`The connector catalog in ${catalog.dir} does not fit this database:\n  ${problems.join('\n  ')}`);
}

/** The content of a built-in version this database has seen; null when it never saw it. */
export async function catalogVersionContent(db: Executor, slug: string, version: number): Promise<ConnectorContent | null> {
  const row = await db.selectFrom('catalog_versions').select('content').where('slug', '=', slug).where('version', '=', version).executeTakeFirst();
  if (!row) return null;
  const { released: _released, ...content } = row.content as unknown as StoredVersion;
  return content;
}

let active: Catalog | null = null;

/** Makes a loaded (and synced) catalog the one this process serves. */
export function installCatalog(catalog: Catalog): void {
  active = catalog;
}

/** The catalog this process serves, installed at start by the connectors area. */
export function builtIns(): Catalog {
  if (!active) throw new Error('The connector catalog is not loaded: the connectors area loads it when the app starts.');
  return active;
}

/** Loads, checks, records and installs the catalog of CATALOG_DIR: the connectors area's start-up step. */
export async function startCatalog(db: Executor, dir: string): Promise<Catalog> {
  const catalog = loadCatalog(dir);
  await syncCatalog(db, catalog);
  installCatalog(catalog);
  return catalog;
}
