import { operations } from '../../generated/operations';
import { serviceRegistry } from '../../src/modules';
import { loadSpec } from '../../src/spec';
import { describeOperations } from '../../src/spec/operations';

const spec = loadSpec();
const registry = serviceRegistry();
const { notImplemented } = registry;
const METHODS = ['get', 'put', 'post', 'delete', 'patch'];
const all = Object.entries(spec.paths).flatMap(([path, item]) =>
  METHODS.filter((m) => item[m]).map((method) => ({ path, method, item, op: item[method] as Record<string, any> })),
);
const params = (e: (typeof all)[number]) => [...(e.item.parameters ?? []), ...(e.op.parameters ?? [])] as Record<string, any>[];
const isOrgScoped = (e: (typeof all)[number]) => params(e).some((p) => p.$ref === '#/components/parameters/OrganizationHeader');
/** Follows local `$ref`s to what they point at. */
const resolve = (node: any): any => {
  let current = node;
  while (current && typeof current.$ref === 'string') {
    current = current.$ref
      .split('/')
      .slice(1)
      .reduce((n: any, key: string) => n[key.replace(/~1/g, '/').replace(/~0/g, '~')], spec);
  }
  return current;
};
const PROTOCOL_TAGS = new Set(['MCP OAuth', 'OAuth discovery']);
const PROTOCOL_SCHEMES = new Set(['scimToken', 'mcpToken']);
/** OAuth, SCIM and MCP speak their own wire formats, errors included (spec/STYLE.md, "Protocol exceptions"). */
const isProtocol = (e: (typeof all)[number]) =>
  PROTOCOL_TAGS.has(e.op.tags[0]) || (e.op.security ?? []).some((req: Record<string, unknown>) => Object.keys(req).some((k) => PROTOCOL_SCHEMES.has(k)));

describe('the contract', () => {
  it('has operations', () => {
    expect(all.length).toBeGreaterThan(0);
  });

  it.each(all.map((e) => [`${e.method.toUpperCase()} ${e.path}`, e] as const))('%s is served or answers 501, and has a generated entry', (_name, e) => {
    const id = e.op.operationId as keyof typeof operations;
    const served = registry.handlers.has(id) || (e.op['x-engine'] !== undefined && registry.engines.some((x) => x.name === e.op['x-engine']));
    expect([id, served]).toEqual([id, !notImplemented.has(id)]);
    expect(operations[id]).toMatchObject({ method: e.method, path: e.path });
  });

  it('is what generated/operations.ts says, operation by operation', () => {
    expect(describeOperations(spec)).toEqual({ operations, problems: [] });
  });

  it('declares x-permission on every org-scoped operation, from the Permission catalog', () => {
    const catalog: string[] = spec.components.schemas.Permission.enum;
    const missing = all.filter((e) => isOrgScoped(e) && !('x-permission' in e.op)).map((e) => e.op.operationId);
    expect(missing).toEqual([]);
    const unknown = all.filter((e) => e.op['x-permission'] && !catalog.includes(e.op['x-permission'])).map((e) => e.op.operationId);
    expect(unknown).toEqual([]);
  });

  it('declares x-audit on every write', () => {
    const missing = all.filter((e) => e.method !== 'get' && !('x-audit' in e.op)).map((e) => e.op.operationId);
    expect(missing).toEqual([]);
  });

  it('gives every operation a unique camelCase operationId, one tag, a summary and a description', () => {
    const ids = all.map((e) => e.op.operationId);
    expect(new Set(ids).size).toBe(ids.length);
    const tags = new Set((spec.tags as { name: string }[]).map((t) => t.name));
    for (const e of all) {
      expect(e.op.operationId).toMatch(/^[a-z][A-Za-z0-9]+$/);
      expect(e.op.tags).toHaveLength(1);
      expect(tags.has(e.op.tags[0])).toBe(true);
      expect(e.op.summary?.length).toBeGreaterThan(0);
      expect(e.op.description?.length).toBeGreaterThan(0);
    }
  });

  it('declares the statuses every authenticated endpoint may answer (service description §7)', () => {
    for (const e of all.filter((x) => (x.op.security ?? []).length > 0 && !isProtocol(x))) {
      expect([e.op.operationId, Object.keys(e.op.responses)]).toEqual([e.op.operationId, expect.arrayContaining(['400', '401', '403', '404', '429'])]);
    }
  });

  it('declares 415 exactly on the operations that take a body', () => {
    for (const e of all) {
      expect([e.op.operationId, '415' in e.op.responses]).toEqual([e.op.operationId, e.op.requestBody !== undefined]);
    }
  });

  it('uses the Error object for every error response outside the protocol endpoints', () => {
    for (const e of all.filter((x) => !isProtocol(x))) {
      for (const [status, response] of Object.entries<Record<string, any>>(e.op.responses)) {
        if (Number(status) < 400) continue;
        const resolved = resolve(response);
        expect([e.op.operationId, status, resolved.content?.['application/json']?.schema]).toEqual([
          e.op.operationId,
          status,
          { $ref: '#/components/schemas/Error' },
        ]);
      }
    }
  });

  it('describes every property of every schema', () => {
    const undocumented: string[] = [];
    const schemas = spec.components.schemas as Record<string, any>;
    const visit = (name: string, schema: Record<string, any>) => {
      for (const [prop, value] of Object.entries<Record<string, any>>(schema.properties ?? {})) {
        // `false`: a member that must not be present (a JSON-RPC notification has no id).
        if (value === (false as unknown) || value.description || (value.$ref && schemas[value.$ref.split('/').pop()]?.description)) continue;
        undocumented.push(`${name}.${prop}`);
      }
      for (const [key, value] of Object.entries<Record<string, any>>(schema.properties ?? {})) {
        if (value.type === 'object' || value.properties) visit(`${name}.${key}`, value);
      }
    };
    for (const [name, schema] of Object.entries(schemas)) visit(name, schema);
    expect(undocumented).toEqual([]);
  });

  it('documents each error code once, with its status', () => {
    const codes: string[] = spec.components.schemas.ErrorCode.enum;
    const described = spec.components.schemas.ErrorCode['x-enumDescriptions'] as Record<string, string>;
    expect(Object.keys(described).sort()).toEqual([...codes].sort());
    for (const code of codes) expect(described[code]).toMatch(/^\d{3}: /);
  });

  // Areas add events in their own schema files; the catalog only has to keep the description's.
  it('lists the 12 events of the description in the catalog, each once', () => {
    const events: string[] = spec.components.schemas.EventType.enum;
    expect(new Set(events).size).toBe(events.length);
    expect(events).toEqual(
      expect.arrayContaining([
        'connection.needs_reauth',
        'connection.disconnected',
        'member.joined',
        'member.removed',
        'member.roles_updated',
        'invite.sent',
        'invite.revoked',
        'role.created',
        'role.updated',
        'role.deleted',
        'restriction.updated',
        'connector.created',
      ]),
    );
  });
});

describe('the service description', () => {
  // A copy of the description's operation list (seed/operations.json): 181 method + path pairs.
  const described: { method: string; path: string }[] = require('./service-description-operations.json');
  const inSpec = new Set(all.map((e) => `${e.method.toUpperCase()} ${e.path}`));

  it('lists 181 operations', () => {
    expect(described).toHaveLength(181);
  });

  it.each(described.map((d) => [`${d.method} ${d.path}`]))('%s is in the spec', (key) => {
    expect(inSpec.has(key)).toBe(true);
  });
});

describe('constructs generators mishandle (spec/STYLE.md, "Written for every generator")', () => {
  const found = (test: (node: Record<string, any>) => boolean) => {
    const hits: string[] = [];
    const walk = (node: unknown, path: string): void => {
      if (Array.isArray(node)) return node.forEach((item, i) => walk(item, `${path}/${i}`));
      if (!node || typeof node !== 'object') return;
      if (test(node as Record<string, any>)) hits.push(path);
      for (const [key, value] of Object.entries(node)) if (key !== 'examples' && key !== 'example') walk(value, `${path}/${key}`);
    };
    walk(spec.components, '#/components');
    walk(spec.paths, '#/paths');
    return hits;
  };

  it('uses enum: [X], never const', () => {
    expect(found((n) => 'const' in n && typeof n.const !== 'object')).toEqual([]);
  });

  it('never puts null inside an enum', () => {
    expect(found((n) => Array.isArray(n.enum) && n.enum.includes(null) && typeof n.type !== 'undefined')).toEqual([]);
  });

  it('lists several types only as [T, "null"]', () => {
    expect(found((n) => Array.isArray(n.type) && n.type.filter((x: string) => x !== 'null').length > 1)).toEqual([]);
  });

  it('gives parameters names of their own', () => {
    const schemas = new Set(Object.keys(spec.components.schemas));
    expect(Object.keys(spec.components.parameters ?? {}).filter((name) => schemas.has(name))).toEqual([]);
  });
});

describe('operations not built yet', () => {
  it('are exactly the handlers that answer 501, and the coverage report counts them', () => {
    const { spawnSync } = require('node:child_process') as typeof import('node:child_process');
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/coverage.ts', '--json'], { cwd: `${__dirname}/../..`, encoding: 'utf8' });
    expect(run.status).toBe(0);
    const report = JSON.parse(run.stdout) as { implemented: number; total: number; tags: { tag: string; built: number; total: number; missing: string[] }[] };
    expect(report.total).toBe(Object.keys(operations).length);
    expect(report.implemented).toBe(Object.keys(operations).length - notImplemented.size);
    expect(report.tags.flatMap((t) => t.missing).sort()).toEqual([...notImplemented].sort());
  });
});

describe('examples', () => {
  const exemplified = (media: any) => 'example' in media || 'examples' in media || 'examples' in (resolve(media.schema) ?? {});
  // Bytes have no meaningful example.
  const binary = (type: string) => type === 'application/octet-stream' || type === '*/*' || type.startsWith('image/');

  it('come with every request body and every success response', () => {
    const missing: string[] = [];
    for (const e of all) {
      const body = resolve(e.op.requestBody);
      for (const [type, media] of Object.entries<any>(body?.content ?? {})) {
        if (!binary(type) && !exemplified(media)) missing.push(`${e.op.operationId} request ${type}`);
      }
      for (const [status, response] of Object.entries<any>(e.op.responses)) {
        if (Number(status) >= 300) continue;
        for (const [type, media] of Object.entries<any>(resolve(response).content ?? {})) {
          if (!binary(type) && !exemplified(media)) missing.push(`${e.op.operationId} ${status} ${type}`);
        }
      }
    }
    expect(missing).toEqual([]);
  });
});

describe('error codes in descriptions', () => {
  const codes = spec.components.schemas.ErrorCode as { enum: string[]; 'x-enumDescriptions': Record<string, string> };
  const statusOf = new Map(codes.enum.map((c) => [c, codes['x-enumDescriptions'][c]!.slice(0, 3)]));

  // The last paragraph of every non-protocol description is "Errors: 400 `code`, …; 403 …",
  // naming codes of ErrorCode under the status they have, each status declared.
  it.each(all.filter((e) => !isProtocol(e)).map((e) => [e.op.operationId as string, e] as const))('%s lists its errors', (_id, e) => {
    const paragraphs = String(e.op.description)
      .trim()
      .split(/\n\s*\n/);
    const last = paragraphs[paragraphs.length - 1] ?? '';
    expect(last.startsWith('Errors:')).toBe(true);
    const problems: string[] = [];
    let status: string | null = null;
    let depth = 0;
    // Backticked names inside parentheses are prose (member names); outside them, codes.
    for (const token of last.slice('Errors:'.length).matchAll(/`([^`]+)`|\b([45]\d\d)\b|([()])/g)) {
      if (token[3]) {
        depth += token[3] === '(' ? 1 : -1;
        continue;
      }
      if (token[2] && depth === 0) {
        status = token[2];
        if (!(status in e.op.responses)) problems.push(`status ${status} is not declared`);
        continue;
      }
      const code = token[1];
      if (!code || !/^[a-z_]+$/.test(code)) continue;
      if (!statusOf.has(code)) {
        if (depth === 0) problems.push(`\`${code}\` is not in ErrorCode`);
        continue;
      }
      const own = statusOf.get(code)!;
      if (!(own in e.op.responses)) problems.push(`\`${code}\` is ${own}, which is not declared`);
      if (status && own !== status && depth === 0) problems.push(`\`${code}\` (${own}) is listed under ${status}`);
    }
    expect(problems).toEqual([]);
  });
});

describe('response objects', () => {
  // Protocol shapes (WebAuthn, MCP JSON-RPC, OAuth, SCIM) keep their standards' optional
  // members; synthetic-tool mapping values are the same objects a client sends.
  const PROTOCOL_SHAPES = /^(WebAuthn|Mcp|JsonRpc|ScimV2|SyntheticToolInputRef$|SyntheticToolStepRef$)/;
  const schemas = spec.components.schemas as Record<string, any>;

  it('carry every member their schema lists (`required` names all properties; empty ones are null)', () => {
    const partial: string[] = [];
    const seen = new Set<string>();
    const visit = (schema: any, where: string, depth: number): void => {
      if (!schema || typeof schema !== 'object' || depth > 20) return;
      if (typeof schema.$ref === 'string') {
        const name = schema.$ref.split('/').pop() as string;
        if (seen.has(name) || PROTOCOL_SHAPES.test(name)) return;
        seen.add(name);
        return visit(schemas[name], name, depth + 1);
      }
      if (schema.properties && schema.additionalProperties !== true) {
        const required = new Set<string>(schema.required ?? []);
        const missing = Object.keys(schema.properties).filter((p) => !required.has(p));
        if (missing.length > 0) partial.push(`${where}: ${missing.join(', ')}`);
      }
      for (const key of ['oneOf', 'anyOf', 'allOf']) for (const branch of schema[key] ?? []) visit(branch, where, depth + 1);
      for (const [name, value] of Object.entries<any>(schema.properties ?? {})) visit(value, `${where}.${name}`, depth + 1);
      if (schema.items) visit(schema.items, `${where}[]`, depth + 1);
    };
    for (const e of all) {
      for (const [status, response] of Object.entries<any>(e.op.responses)) {
        if (!status.startsWith('2')) continue;
        const resolved = resolve(response);
        for (const media of Object.values<any>(resolved.content ?? {})) visit(media.schema, `${e.op.operationId} ${status}`, 0);
      }
    }
    expect(partial).toEqual([]);
  });
});
