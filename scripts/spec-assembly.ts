// Assembles spec/ into one document tree that Redocly can bundle and lint. The sources keep
// each thing in one place: an area's path file holds its URLs (and any tag of its own), an
// area's schema file declares its events beside their data. What the root would otherwise
// list by hand (paths, tags, the event catalog) is built here, in a temporary copy of spec/,
// so that relative `$ref`s resolve exactly as they do in the sources.
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import YAML from 'yaml';

const SPEC = resolve(__dirname, '..', 'spec');
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

type Json = Record<string, any>;

export interface AssembledSpec {
  /** The temporary copy of spec/; its openapi.yml is the assembled root. */
  dir: string;
  root: string;
  cleanup(): void;
}

const readYaml = (file: string): Json => YAML.parse(readFileSync(file, 'utf8')) ?? {};
const yamlFiles = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.yml'))
    .sort();
const pointerEscape = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');

/** `access_request.resolved` → `AccessRequestResolved`: the stem of its data and envelope schema names. */
export const eventSchemaStem = (type: string) =>
  type
    .split(/[._]/)
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('');

function assemblePaths(source: string, root: Json, problems: string[]): void {
  if (root.paths) problems.push('openapi.yml: paths are assembled from paths/*.yml; the root lists none');
  const tags: Json[] = [...(root.tags ?? [])];
  const entries: { url: string; file: string; tag: string | undefined }[] = [];
  const seen = new Map<string, string>();
  for (const file of yamlFiles(join(source, 'paths'))) {
    const doc = readYaml(join(source, 'paths', file));
    for (const tag of doc['x-tags'] ?? []) {
      if (tags.some((t) => t.name === tag.name)) problems.push(`paths/${file}: tag "${tag.name}" is declared twice`);
      tags.push(tag);
    }
    for (const [url, item] of Object.entries<Json>(doc)) {
      if (!url.startsWith('/')) continue;
      if (seen.has(url)) problems.push(`paths/${file}: ${url} is also in paths/${seen.get(url)}`);
      seen.set(url, file);
      const first = METHODS.map((m) => item[m]).find(Boolean) as Json | undefined;
      entries.push({ url, file, tag: first?.tags?.[0] });
    }
  }
  // Paths follow the tag order of their first operation, then their order in their file.
  const tagIndex = new Map(tags.map((t, i) => [t.name as string, i]));
  const rank = (tag: string | undefined) => tagIndex.get(tag ?? '') ?? tags.length;
  const ordered = entries.map((e, i) => ({ ...e, i })).sort((a, b) => rank(a.tag) - rank(b.tag) || a.i - b.i);
  root.paths = Object.fromEntries(ordered.map((e) => [e.url, { $ref: `paths/${e.file}#/${pointerEscape(e.url)}` }]));
  root.tags = tags;
}

/** The event catalog: every `x-event-types` of spec/schemas/*.yml, sorted by type. */
function assembleEvents(source: string, dir: string, problems: string[]): void {
  const declared: { type: string; description: string; file: string }[] = [];
  for (const file of yamlFiles(join(source, 'schemas'))) {
    const doc = readYaml(join(source, 'schemas', file));
    for (const [type, description] of Object.entries<unknown>(doc['x-event-types'] ?? {})) {
      if (!/^[a-z_]+\.[a-z_]+$/.test(type)) problems.push(`schemas/${file}: event type ${type} must be resource.past_participle`);
      if (typeof description !== 'string' || !description) problems.push(`schemas/${file}: event ${type} needs a one-line description`);
      if (!doc[`${eventSchemaStem(type)}Data`]) problems.push(`schemas/${file}: event ${type} needs a schema ${eventSchemaStem(type)}Data in the same file`);
      if (declared.some((d) => d.type === type)) problems.push(`schemas/${file}: event ${type} is declared twice`);
      declared.push({ type, description: String(description), file });
    }
  }
  declared.sort((a, b) => a.type.localeCompare(b.type));
  const eventsFile = join(dir, 'schemas', 'events.yml');
  const events = readYaml(eventsFile);
  events.EventType = {
    type: 'string',
    description: events.EventType?.description ?? 'An organization event.',
    enum: declared.map((d) => d.type),
    'x-enumDescriptions': Object.fromEntries(declared.map((d) => [d.type, d.description])),
  };
  const envelopes: Json = {};
  for (const { type, description, file } of declared) {
    const stem = eventSchemaStem(type);
    envelopes[`${stem}Event`] = {
      type: 'object',
      description: `\`${type}\`: ${description}`,
      additionalProperties: false,
      required: ['id', 'type', 'organization_id', 'occurred_at', 'actor', 'data'],
      properties: {
        id: { $ref: 'ids.yml#/EventId' },
        type: { type: 'string', enum: [type], description: 'The event type.' },
        organization_id: { $ref: 'ids.yml#/OrganizationId' },
        occurred_at: { $ref: 'common.yml#/Timestamp' },
        actor: { $ref: '#/EventActor' },
        data: { $ref: `${file}#/${stem}Data` },
      },
    };
  }
  events.Event = {
    description: events.Event?.description,
    oneOf: Object.keys(envelopes).map((name) => ({ $ref: `#/${name}` })),
    discriminator: { propertyName: 'type', mapping: Object.fromEntries(declared.map((d) => [d.type, `#/${eventSchemaStem(d.type)}Event`])) },
  };
  writeFileSync(eventsFile, YAML.stringify({ ...events, ...envelopes }, { lineWidth: 0 }));
}

/**
 * The permission catalog: the permissions of schemas/permissions.yml, then every
 * `x-permissions` an area's schema file declares (`widget:manage: What it allows.`), in file
 * order. An area adds its permissions without editing the shared list.
 */
function assemblePermissions(source: string, dir: string, problems: string[]): void {
  const catalogFile = join(dir, 'schemas', 'permissions.yml');
  const catalog = readYaml(catalogFile);
  const names: string[] = [...(catalog.Permission?.enum ?? [])];
  const descriptions: Json = { ...(catalog.Permission?.['x-enumDescriptions'] ?? {}) };
  let added = false;
  for (const file of yamlFiles(join(source, 'schemas'))) {
    const doc = readYaml(join(source, 'schemas', file));
    for (const [name, description] of Object.entries<unknown>(doc['x-permissions'] ?? {})) {
      if (!/^[a-z_]+:[a-z_]+$/.test(name)) problems.push(`schemas/${file}: permission ${name} must be resource:action`);
      if (typeof description !== 'string' || !description) problems.push(`schemas/${file}: permission ${name} needs a one-line description`);
      if (names.includes(name)) problems.push(`schemas/${file}: permission ${name} is declared twice`);
      names.push(name);
      descriptions[name] = String(description);
      added = true;
    }
  }
  if (!added) return;
  catalog.Permission = { ...catalog.Permission, enum: names, 'x-enumDescriptions': descriptions };
  writeFileSync(catalogFile, YAML.stringify(catalog, { lineWidth: 0 }));
}

/**
 * Every operation that answers the shared error responses (it declares `TooManyRequests`)
 * may also answer `ServiceUnavailable`: while the server drains for shutdown, or when it
 * cannot reach its database. Declared here once rather than in 200 path items.
 */
function assembleServiceUnavailable(dir: string): void {
  const shared = (name: string) => (response: unknown) =>
    typeof (response as Json | null)?.$ref === 'string' && (response as Json).$ref.endsWith(`#/components/responses/${name}`);
  for (const file of yamlFiles(join(dir, 'paths'))) {
    const path = join(dir, 'paths', file);
    const doc = readYaml(path);
    let changed = false;
    for (const [url, item] of Object.entries<Json>(doc)) {
      if (!url.startsWith('/')) continue;
      for (const method of METHODS) {
        const responses = item[method]?.responses as Json | undefined;
        if (!responses || '503' in responses) continue;
        const tooMany = Object.values(responses).find(shared('TooManyRequests')) as Json | undefined;
        if (!tooMany) continue;
        responses['503'] = { $ref: tooMany.$ref.replace(/TooManyRequests$/, 'ServiceUnavailable') };
        changed = true;
      }
    }
    if (changed) writeFileSync(path, YAML.stringify(doc, { lineWidth: 0 }));
  }
}

/** Copies spec/ and writes the assembled root into the copy. Throws listing every rule broken. */
export function assembleSpec(source: string = SPEC): AssembledSpec {
  const dir = join(mkdtempSync(join(tmpdir(), 'spec-assembled-')), 'spec');
  cpSync(source, dir, { recursive: true });
  const cleanup = () => rmSync(resolve(dir, '..'), { recursive: true, force: true });
  const problems: string[] = [];
  try {
    const root = readYaml(join(source, 'openapi.yml'));
    assemblePaths(source, root, problems);
    assembleEvents(source, dir, problems);
    assemblePermissions(source, dir, problems);
    assembleServiceUnavailable(dir);
    if (problems.length > 0) throw new Error(`spec/ breaks ${problems.length} rule(s):\n  ${problems.join('\n  ')}`);
    const rootFile = join(dir, 'openapi.yml');
    writeFileSync(rootFile, YAML.stringify(root, { lineWidth: 0 }));
    return { dir, root: rootFile, cleanup };
  } catch (err) {
    cleanup();
    throw err;
  }
}
