// What every built operation must refuse, checked for all of them from the operation table
// instead of by a copy of these blocks in each area's tests: 401 without a credential, 400
// without X-Organization-Id, 403 without its permission (or to an API token when it is
// person-only), 400 for an unknown member, a wrong type, an unknown query parameter or a
// malformed id, and 404 for another organization's resource, which stays as it was. A
// refused call changes nothing.
import { operations as generated } from '../../generated/operations';
import { serviceRegistry } from '../../src/modules';
import { PERMISSIONS } from '../../src/identity/permissions';
import { ID_PREFIXES, newId, type IdKind } from '../../src/lib/ids';
import { loadSpec } from '../../src/spec';
import type { OperationMeta } from '../../src/spec/operations';
import { startTestApp, type CallOptions, type TestApp, type TestResponse } from '../support/app';
import type { SeededOrg } from '../support/factories';
import { loadFixtureCreators } from '../support/fixtures';

type Json = Record<string, any>;
const spec = loadSpec();
const operations = generated as unknown as Record<string, OperationMeta>;
const registry = serviceRegistry();
const creators = loadFixtureCreators();
const KIND_OF_PREFIX: ReadonlyMap<string, IdKind> = new Map(Object.entries(ID_PREFIXES).map(([kind, prefix]) => [prefix as string, kind as IdKind]));

const resolve = (node: Json | undefined): Json | undefined => {
  let current = node;
  while (current && typeof current.$ref === 'string') {
    current = (current.$ref as string)
      .slice(2)
      .split('/')
      .reduce<any>((n, k) => n?.[k.replace(/~1/g, '/').replace(/~0/g, '~')], spec);
  }
  return current;
};

interface PathParam {
  name: string;
  /** The schema's name in components (`NotificationDestinationId`), when it has one. */
  schemaName: string | null;
  kind: IdKind | null;
}

interface Row {
  id: string;
  meta: OperationMeta;
  op: Json;
  pathParams: PathParam[];
  /** The request body example, when the operation takes JSON. */
  example: unknown;
  jsonSchema: Json | undefined;
}

function rowOf(id: string, meta: OperationMeta): Row {
  const item = spec.paths[meta.path] as Json;
  const op = item[meta.method] as Json;
  const params = [...(item.parameters ?? []), ...(op.parameters ?? [])].map((p: Json) => resolve(p) as Json);
  const pathParams = params
    .filter((p) => p.in === 'path')
    .map((p) => {
      const ref: string | undefined = p.schema?.$ref;
      const schemaName = ref ? (ref.split('/').pop() ?? null) : null;
      const prefix = /^\^([a-z]+)_/.exec(resolve(p.schema)?.pattern ?? '')?.[1];
      return { name: p.name as string, schemaName, kind: (prefix && KIND_OF_PREFIX.get(prefix)) || null };
    });
  const media = resolve(op.requestBody)?.content?.['application/json'];
  const example = media?.example ?? (Object.values(media?.examples ?? {})[0] as Json | undefined)?.value;
  return { id, meta, op, pathParams, example, jsonSchema: resolve(media?.schema) };
}

const built = Object.entries(operations)
  .filter(([id, meta]) => !registry.notImplemented.has(id) && !meta.engine && meta.security.length > 0)
  .map(([id, meta]) => rowOf(id, meta));
/**
 * Operations the shared credentials can call (protocol schemes are their areas' to test, and so
 * are protocol operations a session may call, such as the OAuth authorization endpoint: they
 * answer in their protocol's form).
 */
const callable = built.filter((r) => !r.meta.protocol && (r.meta.security.includes('apiToken') || r.meta.security.includes('session')));
/** A describe block per operation; none at all while no built operation qualifies (Jest refuses an empty table). */
function forEach(rows: Row[], title: string, body: (row: Row) => void): void {
  if (rows.length > 0) describe.each(rows.map((r) => [r.id, r] as const))(title, (_id, row) => body(row));
}

let t: TestApp;
let a: SeededOrg;
let b: SeededOrg;
let sessionA: string;

beforeAll(async () => {
  t = await startTestApp();
  a = await t.factories.org();
  b = await t.factories.org();
  sessionA = await t.factories.session(a.ownerId, { secondFactor: true });
});
afterAll(() => t.close());

function pathOf(row: Row, values: Record<string, string> = {}): string {
  return row.meta.path.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    if (values[name] !== undefined) return encodeURIComponent(values[name]);
    const param = row.pathParams.find((p) => p.name === name);
    return param?.kind ? newId(param.kind) : 'fixture-value';
  });
}

/** The owner's credential in organization A that this operation takes. */
function credentialFor(row: Row, org: SeededOrg = a): CallOptions {
  const credential: CallOptions = row.meta.security.includes('apiToken') && !row.meta.personOnly ? { token: org.token } : { session: sessionA };
  return row.meta.orgScoped ? { ...credential, org: org.orgId } : credential;
}

/** A 1×1 PNG: the body of an operation that takes raw image bytes (a logo), sent where a JSON one would be. */
const TINY_PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');

/** Required query parameters, each with its schema's first example, so that a call fails only where a test means it to. */
function requiredQuery(row: Row): string {
  const params = [...(spec.paths[row.meta.path]?.parameters ?? []), ...(row.op.parameters ?? [])].map((p: Json) => resolve(p) as Json);
  return params
    .filter((p) => p.in === 'query' && p.required)
    .map((p) => `${encodeURIComponent(p.name)}=${encodeURIComponent(String(resolve(p.schema)?.examples?.[0] ?? p.example ?? 'x'))}`)
    .join('&');
}

async function call(row: Row, path: string, body: unknown, options: CallOptions): Promise<TestResponse> {
  const query = requiredQuery(row);
  const withQuery = query === '' ? path : `${path}${path.includes('?') ? '&' : '?'}${query}`;
  // Raw bodies have no JSON example: a tiny image, or a few bytes.
  const raw = row.meta.bodyMedia.find((m) => m === 'image/png' || m === 'application/octet-stream');
  if (body === undefined && raw && options.raw === undefined) {
    const bytes = raw === 'image/png' ? TINY_PNG : Buffer.from('a few bytes');
    return t.call(row.meta.method.toUpperCase(), withQuery, undefined, { ...options, raw: bytes, headers: { ...options.headers, 'content-type': raw } });
  }
  return t.call(row.meta.method.toUpperCase(), withQuery, body, options);
}

/** Runs a refused call and checks that organization A's audit log did not move. */
async function refused(row: Row, path: string, body: unknown, options: CallOptions): Promise<TestResponse> {
  const before = (await t.factories.auditEntries(a.orgId)).length;
  const res = await call(row, path, body, options);
  expect((await t.factories.auditEntries(a.orgId)).length).toBe(before);
  return res;
}

const codeOf = (res: TestResponse) => (res.body && typeof res.body === 'object' ? (res.body as Json).code : undefined);

it('covers the built operations', () => {
  expect(built.length).toBeGreaterThan(0);
});

forEach(
  built.filter((r) => !r.meta.credentialOptional),
  '%s without a credential',
  (row) => {
    it('answers 401 with a WWW-Authenticate challenge', async () => {
      const res = await refused(row, pathOf(row), row.example, row.meta.orgScoped ? { org: a.orgId } : {});
      expect([res.status, codeOf(res) ?? 'unauthenticated']).toEqual([401, 'unauthenticated']);
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer /);
    });
  },
);

forEach(
  callable.filter((r) => r.meta.permission),
  '%s without its permission',
  (row) => {
    it('answers 403 missing_permission', async () => {
      const roleId = await t.factories.customRole(
        a.orgId,
        PERMISSIONS.filter((p) => p !== row.meta.permission),
      );
      const memberId = await t.factories.member(a.orgId, { roles: [roleId] });
      const options: CallOptions = row.meta.personOnly
        ? { session: await t.factories.session(memberId, { secondFactor: true }), org: a.orgId }
        : { token: await t.factories.token(a.orgId, memberId), org: a.orgId };
      const res = await refused(row, pathOf(row), row.example, options);
      expect([res.status, codeOf(res)]).toEqual([403, 'missing_permission']);
    });
  },
);

forEach(
  callable.filter((r) => r.meta.personOnly),
  '%s with an API token',
  (row) => {
    it('answers 403 requires_person', async () => {
      const res = await refused(row, pathOf(row), row.example, { token: a.token, org: a.orgId });
      expect([res.status, codeOf(res)]).toEqual([403, 'requires_person']);
    });
  },
);

forEach(
  callable.filter((r) => r.meta.orgScoped),
  '%s without X-Organization-Id',
  (row) => {
    it('answers 400 organization_header_required', async () => {
      const { org: _org, ...withoutOrganization } = credentialFor(row);
      const res = await refused(row, pathOf(row), row.example, withoutOrganization);
      expect([res.status, codeOf(res)]).toEqual([400, 'organization_header_required']);
    });
  },
);

forEach(callable, '%s with bad input', (row) => {
  const pointers = (res: TestResponse) => ((res.body as Json).errors as { in: string; pointer: string }[]).map((e) => `${e.in} ${e.pointer}`);

  // An operation with a free-form query parameter (an OAuth redirect URI, which providers extend) takes any name.
  const freeForm = [...(spec.paths[row.meta.path]?.parameters ?? []), ...(row.op.parameters ?? [])]
    .map((p: Json) => resolve(p) as Json)
    .some((p) => p.in === 'query' && resolve(p.schema)?.type === 'object' && resolve(p.schema)?.additionalProperties);
  if (!freeForm) {
    it('answers 400 for an unknown query parameter', async () => {
      const res = await refused(row, `${pathOf(row)}?unknown_param_zz=1`, row.example, credentialFor(row));
      expect([res.status, codeOf(res)]).toEqual([400, 'validation_failed']);
      expect(pointers(res)).toContain('query /unknown_param_zz');
    });
  }

  const ids = row.pathParams.filter((p) => p.kind);
  if (ids.length > 0) {
    it('answers 400 for an id of the wrong shape in the path', async () => {
      const values = Object.fromEntries(ids.map((p) => [p.name, `nope_${p.name}`]));
      const res = await refused(row, pathOf(row, values), row.example, credentialFor(row));
      expect([res.status, codeOf(res)]).toEqual([400, 'validation_failed']);
      expect(pointers(res)).toEqual(expect.arrayContaining(ids.map((p) => `path /${p.name}`)));
    });
  }

  if (row.jsonSchema) {
    it('answers 400 for a body of the wrong type', async () => {
      const res = await refused(row, pathOf(row), [row.example], credentialFor(row));
      expect([res.status, codeOf(res)]).toEqual([400, 'validation_failed']);
    });
  }

  const closed = (schema: Json | undefined): boolean =>
    !!schema && (schema.additionalProperties === false || (Array.isArray(schema.oneOf) && schema.oneOf.every((s: Json) => closed(resolve(s)))));
  if (row.jsonSchema && closed(row.jsonSchema) && row.example && typeof row.example === 'object' && !Array.isArray(row.example)) {
    it('answers 400 for an unknown member', async () => {
      const res = await refused(row, pathOf(row), { ...(row.example as Json), unknown_member_zz: 1 }, credentialFor(row));
      expect([res.status, codeOf(res)]).toEqual([400, 'validation_failed']);
      expect(pointers(res)).toContain('body /unknown_member_zz');
    });
  }
});

/** Every operation with a path parameter, built or not: a broken percent-encoding never reaches a decoder. */
const withPathParams = Object.entries(operations)
  .filter(([, meta]) => meta.path.includes('{'))
  .map(([id, meta]) => rowOf(id, meta));
forEach(withPathParams, '%s with a broken percent-encoding in the path', (row) => {
  it('answers 400 validation_failed, whatever the caller', async () => {
    const first = row.pathParams[0]!.name;
    const path = pathOf({ ...row, meta: { ...row.meta, path: row.meta.path.replace(`{${first}}`, '%E0%A4%A') } });
    // Not through the spec check: an operation not built yet has no area to answer in its own
    // wire format (SCIM, JSON-RPC), so the machinery's Error object is what it gets.
    const res = await fetch(`${t.url}${path}`, { method: row.meta.method.toUpperCase() });
    const body = (await res.json()) as Json;
    expect([res.status, body.code ?? 'validation_failed']).toEqual([400, 'validation_failed']);
  });
});

const ownedByAnother = callable.filter((r) => r.meta.orgScoped && r.pathParams.some((p) => p.schemaName && creators[p.schemaName]));
forEach(ownedByAnother, '%s on another organization’s resource', (row) => {
  it('answers 404 and leaves the resource as it was', async () => {
    const values: Record<string, string> = {};
    for (const p of row.pathParams) if (p.schemaName && creators[p.schemaName]) values[p.name] = await creators[p.schemaName]!(t, b);
    const path = pathOf(row, values);
    const reader = built.find((r) => r.meta.path === row.meta.path && r.meta.method === 'get');
    const before = reader ? await call(reader, path, undefined, credentialFor(reader, b)) : null;
    const res = await refused(row, path, row.example, credentialFor(row));
    expect([res.status, codeOf(res)]).toEqual([404, 'not_found']);
    // A reader that answers an error (a connection's tools while it is pending) has nothing to compare but its request id.
    if (reader && before && before.status < 300) expect((await call(reader, path, undefined, credentialFor(reader, b))).body).toEqual(before.body);
  });
});
