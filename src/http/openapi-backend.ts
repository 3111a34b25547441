// Everything that adapts openapi-backend lives here. We use it for what it does well:
// dereferencing the document and compiling Ajv validators per operation. Routing, the guard
// and dispatch are ours. The library is patched in two places (its OpenAPI 3.0 definition
// check, and how it compiles schemas); `checkOpenApiBackend` verifies at start-up that the
// installed version and each member relied on are what this file was written against, so an
// upgrade fails loudly at boot instead of misrouting or mis-validating quietly.
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { fullFormats } from 'ajv-formats/dist/formats';
import type { ErrorObject } from 'ajv';
import * as library from 'openapi-backend';
import { OpenAPIBackend, OpenAPIValidator, type Operation, type Request as BackendRequest } from 'openapi-backend';
import type { OpenApiDocument } from '../spec';
import type { ValidationProblem } from './errors';

/** The versions this adapter was written and tested against. */
export const SUPPORTED_VERSIONS = ['5.20.1'];

interface LibraryShape {
  version: string;
  OpenAPIBackend: { prototype: Record<string, unknown> };
  OpenAPIValidator: Record<string, unknown> & { prototype: Record<string, unknown> };
  OpenAPIRouter: { prototype: Record<string, unknown> };
}

const installed = (): LibraryShape => ({
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  version: (require('openapi-backend/package.json') as { version: string }).version,
  OpenAPIBackend: library.OpenAPIBackend as unknown as LibraryShape['OpenAPIBackend'],
  OpenAPIValidator: library.OpenAPIValidator as unknown as LibraryShape['OpenAPIValidator'],
  OpenAPIRouter: library.OpenAPIRouter as unknown as LibraryShape['OpenAPIRouter'],
});

/** Throws, naming what differs, unless the library is a version and shape this adapter knows. */
export function checkOpenApiBackend(lib: LibraryShape = installed()): void {
  const problems: string[] = [];
  if (!SUPPORTED_VERSIONS.includes(lib.version)) problems.push(`version ${lib.version} is installed; this adapter supports ${SUPPORTED_VERSIONS.join(', ')}`);
  const expect = (owner: Record<string, unknown>, member: string, where: string) => {
    if (typeof owner[member] !== 'function') problems.push(`${where}.${member} is not a function`);
  };
  expect(lib.OpenAPIBackend.prototype, 'init', 'OpenAPIBackend.prototype');
  expect(lib.OpenAPIBackend.prototype, 'validateDefinition', 'OpenAPIBackend.prototype');
  expect(lib.OpenAPIValidator, 'compileSchema', 'OpenAPIValidator');
  for (const member of [
    'validateRequest',
    'validateResponse',
    'preCompileRequestValidators',
    'preCompileResponseValidators',
    'getRequestValidatorsForOperation',
  ]) {
    expect(lib.OpenAPIValidator.prototype, member, 'OpenAPIValidator.prototype');
  }
  for (const member of ['getOperations', 'parseRequest']) expect(lib.OpenAPIRouter.prototype, member, 'OpenAPIRouter.prototype');
  if (problems.length > 0) {
    throw new Error(`openapi-backend does not fit src/http/openapi-backend.ts: ${problems.join('; ')}. Pin a supported version or adapt that file.`);
  }
}

// Members whose value is data (or a map of schemas), never a schema: `{ $ref }` cannot stand in for them.
const DATA_MEMBERS = new Set(['enum', 'const', 'default', 'example', 'examples', 'required', 'discriminator', 'mapping', 'x-enumDescriptions']);
const SCHEMA_MAPS = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas']);

/**
 * openapi-backend compiles each operation's schemas after replacing every object it meets a
 * second time with a `$ref` to the first (cycle.js). That is right for a shared schema, but the
 * dereferenced document also shares arrays and maps (`$ref` siblings are merged shallowly,
 * so two schemas can hold the same `anyOf`, `required` or `properties`), and Ajv refuses
 * `{ $ref }` in their place. Shared schemas still become `$ref`s (compact, and cycles stay
 * finite); arrays, schema maps and data are copied.
 */
function decycleSchemas(root: unknown): unknown {
  const seen = new WeakMap<object, string>();
  const pointer = (path: string, key: string | number) => `${path}/${String(key).replace(/~/g, '~0').replace(/\//g, '~1')}`;
  const copy = (value: unknown, path: string, role: 'schema' | 'map' | 'data'): unknown => {
    if (typeof value !== 'object' || value === null) return value;
    if (role === 'data') return structuredClone(value);
    if (Array.isArray(value)) return value.map((item, i) => copy(item, pointer(path, i), 'schema'));
    if (role === 'schema') {
      const first = seen.get(value);
      if (first !== undefined) return { $ref: first };
      seen.set(value, path);
    }
    const result: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      const childRole = role === 'map' ? 'schema' : DATA_MEMBERS.has(key) ? 'data' : SCHEMA_MAPS.has(key) ? 'map' : 'schema';
      result[key] = copy(item, pointer(path, key), childRole);
    }
    return result;
  };
  return copy(root, '#', 'schema');
}

/**
 * The document as openapi-backend can dereference and validate it: JSON media types with a
 * suffix (`application/scim+json`) are aliased to `application/json` so their bodies are
 * validated too, and discriminator mappings (which Ajv does not support, and which carry no
 * information beyond the branches' `const`) are dropped, as are examples. The served
 * document keeps all of them.
 */
function documentForValidation(spec: OpenApiDocument): OpenApiDocument {
  const copy = structuredClone(spec);
  const visit = (node: unknown, parentKey?: string): void => {
    if (Array.isArray(node)) return node.forEach((item) => visit(item));
    if (!node || typeof node !== 'object') return;
    const record = node as Record<string, any>;
    // Examples validate nothing; dropping them spares Ajv the work. (`properties.examples`
    // would be a member named so, and is kept.)
    if (parentKey !== 'properties') {
      delete record.examples;
      delete record.example;
    }
    if (record.discriminator && typeof record.discriminator === 'object') {
      delete record.discriminator.mapping;
      // Ajv's discriminator passes a value that is not an object (null, 1, "x") without
      // looking at oneOf: a discriminated union is of objects.
      record.type ??= 'object';
    }
    if (record.content && typeof record.content === 'object' && !record.content['application/json']) {
      const suffixed = Object.keys(record.content).find((type) => /^application\/[\w.-]+\+json$/.test(type));
      if (suffixed) record.content['application/json'] = record.content[suffixed];
    }
    for (const [key, value] of Object.entries(record)) visit(value, key);
  };
  visit(copy);
  return copy;
}

/** Ajv's errors as the Error object lists them: where, a JSON pointer, and a sentence. */
function problemsFrom(errors: ErrorObject[]): ValidationProblem[] {
  const seen = new Set<string>();
  const problems: ValidationProblem[] = [];
  for (const error of errors) {
    // oneOf/anyOf summaries repeat what the branch errors already say.
    if (error.keyword === 'oneOf' || error.keyword === 'anyOf' || error.keyword === 'if') continue;
    const [, part = '', ...rest] = error.instancePath.split('/');
    const where = part === 'requestBody' ? 'body' : part === 'header' ? 'header' : part === 'path' ? 'path' : part === 'query' ? 'query' : 'body';
    let pointer = rest.length > 0 ? `/${rest.join('/')}` : '';
    let message = error.message ?? 'is not valid';
    const params = error.params as Record<string, unknown>;
    if (error.keyword === 'required' && part === '' && params.missingProperty === 'requestBody') {
      message = 'a body is required';
    } else if (error.keyword === 'required') {
      pointer += `/${String(params.missingProperty)}`;
      message = 'is required';
    } else if (error.keyword === 'additionalProperties') {
      pointer += `/${String(params.additionalProperty)}`;
      message = where === 'query' ? 'is not a parameter of this operation' : 'is not a known member';
    } else if (error.keyword === 'enum' && Array.isArray(params.allowedValues)) {
      const allowed = (params.allowedValues as unknown[]).map((v) => JSON.stringify(v));
      message = `must be one of ${allowed.length > 25 ? `${allowed.slice(0, 25).join(', ')}, …` : allowed.join(', ')}`;
    } else if (error.keyword === 'discriminator') {
      pointer += `/${String(params.tag)}`;
      message = params.tagValue === undefined ? 'is required' : `${JSON.stringify(params.tagValue)} is not one of the accepted values`;
    } else if (error.keyword === 'const') {
      message = `must be ${JSON.stringify(params.allowedValue)}`;
    }
    const key = `${where} ${pointer} ${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    problems.push({ in: where, pointer, message });
  }
  return problems;
}

/** A request as the validator reads it. */
export interface RequestToValidate {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  query: Record<string, unknown>;
  /** A parsed JSON, form or multipart body; undefined when there is none or it is a stream. */
  body: unknown;
}

export interface SpecValidator {
  /** Every operation of the document, dereferenced, by operationId. */
  operations: ReadonlyMap<string, Operation>;
  /**
   * The problems found (400 `validation_failed`; `total` counts them all when only the first
   * ones were kept), or the path and query parameters coerced to their types.
   */
  validateRequest(
    req: RequestToValidate,
    operation: Operation,
  ):
    | { problems: ValidationProblem[]; total: number; raw: { params: Record<string, unknown>; query: Record<string, unknown> } }
    | { params: Record<string, unknown>; query: Record<string, unknown> };
  /** What does not match the spec in a response body; empty when it matches. */
  validateResponse(body: unknown, operation: Operation, status: number): string[];
  /** Compiles every validator now (they are otherwise compiled on first use); throws on a schema Ajv refuses. */
  compileAll(): void;
}

/** Ajv errors kept per validator run: openapi-backend spreads them into one call, which a huge body overflows. */
const KEPT_ERRORS = 200;
/** How many errors the last validator run found before they were cut to KEPT_ERRORS (validation is synchronous). */
let lastErrorCount = 0;

type CompiledSchema = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };

function keepingFewErrors(validate: CompiledSchema): CompiledSchema {
  const run = ((data: unknown) => {
    const valid = validate(data);
    const errors = validate.errors ?? null;
    lastErrorCount += errors?.length ?? 0;
    run.errors = errors && errors.length > KEPT_ERRORS ? errors.slice(0, KEPT_ERRORS) : errors;
    return valid;
  }) as CompiledSchema;
  return run;
}

let patched = false;

interface ParsedRequest {
  params: Record<string, string>;
  headers: Record<string, unknown>;
  query: Record<string, unknown>;
  cookies: Record<string, string>;
  requestBody: unknown;
}
interface ParsingRouter {
  parseRequest(req: BackendRequest, operation?: Operation): ParsedRequest;
}

/**
 * openapi-backend's parseRequest compiles the operation's path template into matchers,
 * deep-clones the query and parses cookies on every request: a twentieth of an authenticated
 * read's CPU. For what most requests are (no cookie, already-parsed body, query parameters
 * without `content` or `explode: false`) this reads path parameters from a table built once
 * per template and copies the query shallowly; anything else takes the library's own way.
 */
function useQuickParse(router: ParsingRouter): void {
  const library = router.parseRequest.bind(router);
  const positions = new Map<string, Array<[number, string]> | null>();
  const templateOf = (operation: Operation): Array<[number, string]> | null => {
    let table = positions.get(operation.operationId as string);
    if (table === undefined) {
      const query = (operation.parameters ?? []).filter((p) => !('$ref' in p) && p.in === 'query') as Array<{ content?: unknown; explode?: boolean }>;
      const simple = query.every((p) => !p.content && p.explode !== false);
      table = simple
        ? splitPath(operation.path).flatMap((segment, i): Array<[number, string]> => (/^\{[^{}]+\}$/.test(segment) ? [[i, segment.slice(1, -1)]] : []))
        : null;
      positions.set(operation.operationId as string, table);
    }
    return table;
  };
  router.parseRequest = (req, operation) => {
    const table = operation ? templateOf(operation) : null;
    const body = req.body as unknown;
    const parsedBody = body === undefined || body === null || (typeof body === 'object' && !Buffer.isBuffer(body));
    if (!operation || !table || req.headers.cookie !== undefined || !parsedBody || typeof req.query !== 'object') return library(req, operation);
    const segments = splitPath(req.path);
    const params: Record<string, string> = {};
    for (const [index, name] of table) params[name] = decodeURIComponent(segments[index] ?? '');
    const query: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(req.query)) query[name] = Array.isArray(value) ? [...value] : value;
    return { params, headers: { ...req.headers }, query, cookies: {}, requestBody: body };
  };
}

/** A path's segments, as openapi-backend reads them (a trailing slash ignored). */
function splitPath(path: string): string[] {
  const trimmed = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
  return trimmed.split('/').slice(1);
}

/**
 * RFC 3339 date-times that JavaScript can also read: RFC 3339 allows a leap second (`23:59:60`),
 * which Date cannot represent (Invalid Date), and a handler then fails on it with a 500.
 * Refused here as any other bad date-time (400 validation_failed).
 */
const rfc3339 = fullFormats['date-time'] as { validate: (value: string) => boolean; compare: (a: string, b: string) => number | undefined };
// And PostgreSQL's timestamptz, whose last year is 9999 (in UTC: 9999-12-31T23:59:59-14:00 is
// in year 10000, which JavaScript writes +010000-… and PostgreSQL reads as an offset).
const LATEST = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const dateTime = {
  type: 'string' as const,
  validate: (value: string) => {
    if (!rfc3339.validate(value)) return false;
    const at = Date.parse(value);
    return !Number.isNaN(at) && at <= LATEST;
  },
  compare: rfc3339.compare,
};

/**
 * The most items a body that is an array may hold: the largest `maxItems` of the body
 * schema's array forms (itself, or its oneOf/anyOf members); null when it has none or one
 * without a cap. Checked before the validators run: Ajv with allErrors goes on through every
 * item past maxItems, in time that grows with the square of their number.
 */
function arrayBodyCap(operation: Operation): number | null {
  const schema = (operation.requestBody as { content?: Record<string, { schema?: Record<string, any> }> } | undefined)?.content?.['application/json']?.schema;
  if (!schema) return null;
  const forms = [schema, ...((schema.oneOf ?? schema.anyOf ?? []) as Record<string, any>[])].filter((form) => form?.type === 'array');
  if (forms.length === 0 || forms.some((form) => typeof form.maxItems !== 'number')) return null;
  return Math.max(...forms.map((form) => form.maxItems as number));
}

/** A copy of a schema in which objects accept members it does not name (cycles kept as cycles). */
function acceptingUnknownMembers(schema: unknown, copies = new Map<object, unknown>()): unknown {
  if (typeof schema !== 'object' || schema === null) return schema;
  const done = copies.get(schema);
  if (done !== undefined) return done;
  if (Array.isArray(schema)) {
    const list: unknown[] = [];
    copies.set(schema, list);
    for (const item of schema) list.push(acceptingUnknownMembers(item, copies));
    return list;
  }
  const copy: Record<string, unknown> = {};
  copies.set(schema, copy);
  for (const [key, value] of Object.entries(schema)) {
    if ((key === 'additionalProperties' || key === 'unevaluatedProperties') && value === false) continue;
    copy[key] = DATA_MEMBERS.has(key) ? value : acceptingUnknownMembers(value, copies);
  }
  return copy;
}

/**
 * Protocol operations (`x-protocol`) ignore what they do not know, as their protocols require
 * (OAuth: RFC 6749 §3.1; SCIM clients send attributes of their own; JSON-RPC members of later
 * revisions): their request bodies' schemas accept unknown members, here in the dereferenced
 * document the validators are compiled from. Returns the query parameters each of them declares:
 * any other is dropped before validation.
 */
function loosenProtocolOperations(definition: { paths?: Record<string, Record<string, any>> }): Map<string, ReadonlySet<string>> {
  const declared = new Map<string, ReadonlySet<string>>();
  for (const item of Object.values(definition.paths ?? {})) {
    for (const method of ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']) {
      const op = item[method] as Record<string, any> | undefined;
      if (!op || !op['x-protocol']) continue;
      const parameters = [...(item.parameters ?? []), ...(op.parameters ?? [])] as Array<{ in?: string; name?: string }>;
      declared.set(op.operationId as string, new Set(parameters.filter((p) => p.in === 'query' && p.name).map((p) => p.name as string)));
      const content = op.requestBody?.content as Record<string, { schema?: unknown }> | undefined;
      if (!content) continue;
      op.requestBody = {
        ...op.requestBody,
        content: Object.fromEntries(Object.entries(content).map(([type, media]) => [type, { ...media, schema: acceptingUnknownMembers(media.schema) }])),
      };
    }
  }
  return declared;
}

function onlyKnown(query: Record<string, unknown>, known: ReadonlySet<string>): Record<string, unknown> {
  const kept: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(query)) if (known.has(name)) kept[name] = value;
  return kept;
}

export async function createSpecValidator(spec: OpenApiDocument): Promise<SpecValidator> {
  checkOpenApiBackend();
  if (!patched) {
    patched = true;
    (OpenAPIValidator as unknown as { compileSchema: (ajv: { compile(schema: unknown): CompiledSchema }, schema: unknown) => unknown }).compileSchema = (
      ajv,
      schema,
    ) => keepingFewErrors(ajv.compile(decycleSchemas(schema)));
  }
  const api = new OpenAPIBackend({ definition: documentForValidation(spec) as any, strict: true, quick: false, validate: false });
  // openapi-backend checks documents against the OpenAPI 3.0 meta-schema, which rejects 3.1;
  // the spec is linted by Redocly instead (toolchain.md §2).
  api.validateDefinition = () => api.document;
  await api.init();
  const protocolQuery = loosenProtocolOperations(api.definition as unknown as { paths?: Record<string, Record<string, any>> });
  // Each operation's validators are compiled on its first request: compiling all ~220
  // operations up front made every start (and every test file) seconds slower.
  const validator = new OpenAPIValidator({
    definition: api.definition,
    router: api.router,
    lazyCompileValidators: true,
    coerceTypes: true,
    ajvOpts: { allErrors: true },
    customizeAjv: (_original, options) => {
      const ajv = new Ajv2020({ ...options, allErrors: true, strict: false, discriminator: true });
      addFormats(ajv);
      ajv.addFormat('date-time', dateTime);
      return ajv as any;
    },
  });
  const operations = new Map(api.router.getOperations().map((op) => [op.operationId as string, op]));
  const parsing = api.router as unknown as ParsingRouter;
  useQuickParse(parsing);
  const requestValidators = validator as unknown as { getRequestValidatorsForOperation(operationId: string): CompiledSchema[] | null };
  // Per operation: the query parameters whose schema is an array (a single value is validated as a one-item array).
  const arrayQuery = new Map<string, ReadonlySet<string>>();
  const arrayQueryOf = (operation: Operation): ReadonlySet<string> => {
    let names = arrayQuery.get(operation.operationId as string);
    if (!names) {
      names = new Set<string>();
      const seen = new Set<string>();
      for (const p of (operation.parameters ?? []) as Array<{ name?: string; in?: string; schema?: { type?: unknown } }>) {
        if (p.in !== 'query' || !p.name || seen.has(p.name)) continue;
        seen.add(p.name);
        if (p.schema?.type === 'array') (names as Set<string>).add(p.name);
      }
      arrayQuery.set(operation.operationId as string, names);
    }
    return names;
  };

  // Per operation: the most items an array body may hold (arrayBodyCap), worked out on its first request.
  const arrayCaps = new Map<string, number | null>();

  /**
   * openapi-backend's OpenAPIRequestValidator.validateRequest, step for step (the same parsed
   * parameters, the same compiled validators, the same coercion and errors) without what it
   * spends per request on copying the request, lodash look-ups and empty-value filtering.
   */
  function validateWithLibraryValidators(
    req: RequestToValidate,
    operation: Operation,
  ): { errors: ErrorObject[] | null; params: unknown; query: unknown; raw?: { params: Record<string, unknown>; query: Record<string, unknown> } } {
    if (Array.isArray(req.body)) {
      const id = operation.operationId as string;
      let cap = arrayCaps.get(id);
      if (cap === undefined) arrayCaps.set(id, (cap = arrayBodyCap(operation)));
      if (cap !== null && req.body.length > cap) {
        const tooMany: ErrorObject = {
          keyword: 'maxItems',
          instancePath: '/requestBody',
          schemaPath: '#/requestBody',
          params: { limit: cap },
          message: `must NOT have more than ${cap} items`,
        };
        return { errors: [tooMany], params: undefined, query: req.query, raw: { params: {}, query: req.query } };
      }
    }
    const validators = requestValidators.getRequestValidatorsForOperation(operation.operationId as string) || [];
    const { params, query, headers, cookies, requestBody } = parsing.parseRequest(req as unknown as BackendRequest, operation);
    const raw = { params: { ...params }, query: { ...query } };
    if (query) {
      const arrays = arrayQueryOf(operation);
      if (arrays.size > 0) for (const name of Object.keys(query)) if (typeof query[name] === 'string' && arrays.has(name)) query[name] = [query[name]];
    }
    const parameters: Record<string, unknown> = {};
    if (params != null) parameters.path = params;
    if (query != null) parameters.query = query;
    if (headers != null) parameters.header = headers;
    if (cookies != null) parameters.cookie = cookies;
    const errors: ErrorObject[] = [];
    if (typeof req.body !== 'object' && req.body !== undefined) {
      const content = (operation.requestBody as { content?: Record<string, unknown> } | undefined)?.content ?? {};
      const formats = Object.keys(content);
      if (formats.length === 1 && formats[0] === 'application/json') {
        try {
          JSON.parse(`${req.body as string}`);
        } catch (err) {
          if (err instanceof Error) errors.push({ keyword: 'parse', instancePath: '', schemaPath: '#/requestBody', params: [] as never, message: err.message });
        }
      }
    }
    if (typeof requestBody === 'object' || headers['content-type'] === 'application/json') parameters.requestBody = requestBody;
    let coercedQuery: unknown = req.query;
    let coercedParams: unknown = undefined;
    for (const validate of validators) {
      validate(parameters);
      if (validate.errors) {
        errors.push(...validate.errors);
      } else {
        coercedQuery = parameters.query;
        coercedParams = parameters.path;
      }
    }
    return { errors: errors.length > 0 ? errors : null, params: coercedParams, query: coercedQuery, raw };
  }

  return {
    operations,
    validateRequest(req, operation) {
      lastErrorCount = 0;
      const known = protocolQuery.get(operation.operationId as string);
      const result = validateWithLibraryValidators(known ? { ...req, query: onlyKnown(req.query, known) } : req, operation);
      if (result.errors) {
        const problems = problemsFrom(result.errors);
        // Cut short: count what Ajv found (summaries of oneOf branches included, so a little high).
        const cut = lastErrorCount > result.errors.length;
        return { problems, total: cut ? lastErrorCount : problems.length, raw: { params: result.raw?.params ?? {}, query: req.query } };
      }
      return { params: (result.params ?? {}) as Record<string, unknown>, query: (result.query ?? {}) as Record<string, unknown> };
    },
    validateResponse(body, operation, status) {
      const result = validator.validateResponse(body, operation, status);
      return (result.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? 'is not valid'}`);
    },
    compileAll() {
      validator.preCompileRequestValidators();
      validator.preCompileResponseValidators();
    },
  };
}
