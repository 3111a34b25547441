import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import type { ErrorObject } from 'ajv';
import type { Request as ExpressRequest, Response as ExpressResponse } from 'express';
import { OpenAPIBackend, OpenAPIValidator, type Context, type Operation, type Request as BackendRequest } from 'openapi-backend';
import { operations as generatedOperations, type HandlerMap, type OperationId, type OperationMeta } from '../../generated/operations';
import { authenticate, loadOrgAccess, type Authentication, type Caller, type OrgAccess } from '../auth/credentials';
import { isId } from '../lib/ids';
import type { OpenApiDocument } from '../spec';
import { RequestContext, type AppDeps } from './context';
import { ApiError, notImplementedError, validationError, type ValidationProblem } from './errors';
import { fromParserError, requestState, sendError } from './respond';
import { failedAuthenticationLimit } from './rate-limit';
import { PathRouter } from './router';

export type Handlers = HandlerMap<RequestContext>;

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
(OpenAPIValidator as unknown as { compileSchema: (ajv: { compile(schema: unknown): unknown }, schema: unknown) => unknown }).compileSchema = (ajv, schema) =>
  ajv.compile(decycleSchemas(schema));

/**
 * openapi-backend wants a document it can dereference and validate with Ajv: JSON media
 * types with a suffix (`application/scim+json`) are aliased to `application/json` so their
 * bodies are validated too, and discriminator mappings (which Ajv does not support, and
 * which carry no information beyond the branches' `const`) are dropped, as are examples.
 * The served document keeps all of them.
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
    if (record.discriminator && typeof record.discriminator === 'object') delete record.discriminator.mapping;
    if (record.content && typeof record.content === 'object' && !record.content['application/json']) {
      const suffixed = Object.keys(record.content).find((type) => /^application\/[\w.-]+\+json$/.test(type));
      if (suffixed) record.content['application/json'] = record.content[suffixed];
    }
    for (const [key, value] of Object.entries(record)) visit(value, key);
  };
  visit(copy);
  return copy;
}

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
      message = 'a JSON body is required';
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

/** A body where the operation takes none is a 400; a body of another media type a 415. Then parse errors. */
function checkBody(operation: Operation, req: ExpressRequest): void {
  const declared = Object.keys(operation.requestBody && 'content' in operation.requestBody ? operation.requestBody.content : {});
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (!hasBody) return;
  if (declared.length === 0) {
    throw validationError([{ in: 'body', pointer: '', message: `${req.method} ${operation.path} takes no body` }]);
  }
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  if (!declared.includes(type)) {
    throw new ApiError('unsupported_media_type', `Send the body as ${declared.join(' or ')}${type ? `, not ${type}` : ''}.`);
  }
  const { bodyError } = requestState(req);
  if (bodyError) throw fromParserError(bodyError as { type?: string }) ?? bodyError;
}

export interface OperationRouter {
  handle(req: ExpressRequest, res: ExpressResponse): Promise<void>;
  operationCount: number;
  /** Compiles every operation's validators now (they are otherwise compiled on first use); throws on a schema Ajv refuses. */
  compileAll(): void;
}

/**
 * The path of a request through the spec: match (404/405), authenticate against the
 * operation's security (401), the guard (organization header, membership, second factor,
 * person-only, x-permission: 400/403), media type (415), validation (400), then the handler.
 */
export interface RouterDefinition {
  spec: OpenApiDocument;
  handlers: Handlers;
  notImplemented: ReadonlySet<OperationId>;
  /** Per-operation metadata; generated/operations.ts unless a test brings a fixture spec. */
  operations?: Readonly<Record<string, OperationMeta>>;
}

export async function createOperationRouter(deps: AppDeps, definition: RouterDefinition): Promise<OperationRouter> {
  const { spec, handlers, notImplemented } = definition;
  const operations = (definition.operations ?? generatedOperations) as Readonly<Record<OperationId, OperationMeta>>;
  const api = new OpenAPIBackend({
    definition: documentForValidation(spec) as any,
    strict: false,
    quick: false,
    // Validation runs in the operation wrapper, after the guard, with the validator made below.
    validate: false,
  });
  // openapi-backend checks documents against the OpenAPI 3.0 meta-schema, which rejects 3.1;
  // the spec is linted by Redocly instead (toolchain.md §2).
  api.validateDefinition = () => api.document;
  await api.init();
  // Each operation's validators are compiled on its first request: compiling all ~220
  // operations up front made every start (and every test file) seconds slower.
  api.validator = new OpenAPIValidator({
    definition: api.definition,
    router: api.router,
    lazyCompileValidators: true,
    coerceTypes: true,
    ajvOpts: { allErrors: true },
    customizeAjv: (_original, options) => {
      const ajv = new Ajv2020({ ...options, allErrors: true, strict: false, discriminator: true });
      addFormats(ajv);
      return ajv as any;
    },
  });

  const routes = new PathRouter<Operation>();
  const all = api.router.getOperations();
  for (const op of all) routes.add(op.method, op.path, op);
  api.router.getOperations = () => all;
  api.router.matchOperation = ((req: BackendRequest & { allowed?: string[] }, strict?: boolean) => {
    const match = routes.match(req.method, req.path);
    if (match?.route) return match.route;
    if (!strict) return undefined;
    if (match) {
      req.allowed = match.allowed;
      throw new Error('405-methodNotAllowed');
    }
    throw new Error('404-notFound');
  }) as typeof api.router.matchOperation;

  const limitFailures = failedAuthenticationLimit(deps.config.rateLimit.authFailures, deps.config.rateLimit.durationSeconds);
  const authOf = (req: ExpressRequest): Promise<Authentication> => {
    const state = requestState(req);
    state.authentication ??= authenticate(deps.db, state.credential);
    return state.authentication;
  };
  const callerOf = (kind: Caller['kind']) => async (_c: Context, req: ExpressRequest) => {
    const auth = await authOf(req);
    return auth.status === 'ok' && auth.caller.kind === kind ? auth.caller : undefined;
  };
  api.registerSecurityHandler('apiToken', callerOf('api_token'));
  api.registerSecurityHandler('session', callerOf('session'));
  // Schemes of areas not built yet (SCIM, MCP, OAuth clients) accept nothing until their area
  // registers a real handler.
  for (const scheme of Object.keys(spec.components?.securitySchemes ?? {})) {
    if (!api.securityHandlers[scheme]) api.registerSecurityHandler(scheme, () => undefined);
  }

  api.register({
    notFound: async (_c: Context, req: ExpressRequest) => {
      throw new ApiError('not_found', `No operation at ${req.path}.`);
    },
    methodNotAllowed: async (c: Context & { request: { allowed?: string[] } }, req: ExpressRequest) => {
      const allowed = (backendRequest(req).allowed ?? []).join(', ');
      throw new ApiError('method_not_allowed', `${req.path} supports ${allowed}, not ${req.method}.`, { headers: { Allow: allowed } });
    },
    unauthorizedHandler: async (c: Context, req: ExpressRequest) => {
      refuseIfNotImplemented(c.operation.operationId as OperationId);
      const auth = await authOf(req);
      const meta = operations[c.operation.operationId as OperationId];
      if (auth.status === 'ok') {
        if (meta.personOnly && auth.caller.kind === 'api_token') {
          throw new ApiError('requires_person', 'This action is reserved for a person signed in to the web app; API tokens cannot do it.');
        }
        throw new ApiError('invalid_token', `This operation does not accept ${auth.caller.kind === 'api_token' ? 'an API token' : 'a session'}.`);
      }
      if (auth.status === 'invalid') {
        await limitFailures(req.ip);
        throw new ApiError('invalid_token', auth.detail);
      }
      throw new ApiError('unauthenticated', 'Send an API token as "Authorization: Bearer cpt_…", or sign in.');
    },
  });

  // A gap in the contract is answered as one, to every caller: there is nothing to protect yet.
  const refuseIfNotImplemented = (operationId: OperationId) => {
    if (notImplemented.has(operationId)) {
      throw notImplementedError(operationId);
    }
  };

  const wrap = (operationId: OperationId) => async (c: Context, req: ExpressRequest, res: ExpressResponse) => {
    refuseIfNotImplemented(operationId);
    const meta = operations[operationId];
    const state = requestState(req);
    const auth = meta.security.length > 0 ? await authOf(req) : ({ status: 'none' } as const);
    const caller = auth.status === 'ok' ? auth.caller : null;

    let org: OrgAccess | null = null;
    if (meta.orgScoped && caller) {
      const header = req.headers['x-organization-id'];
      if (header === undefined || header === '') {
        throw new ApiError('organization_header_required', 'Name the organization to act in with the X-Organization-Id header; GET /user/me lists yours.');
      }
      if (typeof header !== 'string' || !isId('organization', header)) {
        throw validationError([{ in: 'header', pointer: '/x-organization-id', message: 'must be an organization id (org_…)' }]);
      }
      org = await loadOrgAccess(deps.db, caller, header);
      if (!org) {
        throw new ApiError('not_a_member', caller.kind === 'api_token'
          ? `This API token belongs to another organization than ${header}.`
          : `You are not an active member of ${header}.`);
      }
      if (caller.kind === 'session' && org.requireMfa && !caller.secondFactorAt) {
        throw new ApiError('mfa_setup_required', `Organization ${header} requires a second factor; verify one (POST /auth/mfa/verify) or enroll TOTP or a passkey first.`);
      }
    }
    if (meta.personOnly && caller?.kind === 'api_token') {
      throw new ApiError('requires_person', 'This action is reserved for a person signed in to the web app; API tokens cannot do it.');
    }
    if (meta.permission && !org?.permissions.has(meta.permission)) {
      throw new ApiError('missing_permission', `This operation needs the permission ${meta.permission}.`);
    }

    checkBody(c.operation, req);
    const validation = api.validator.validateRequest(backendRequest(req), c.operation);
    if (validation.errors) throw validationError(problemsFrom(validation.errors));

    const ctx = new RequestContext(deps, operationId, meta, state.requestId, state.log, caller, org, {
      ip: req.ip ?? null,
      userAgent: typeof req.headers['user-agent'] === 'string' ? req.headers['user-agent'].slice(0, 512) : null,
    });
    const input = { params: validation.coerced?.params ?? {}, query: validation.coerced?.query ?? {}, body: req.body };
    const handler = handlers[operationId] as (input: unknown, ctx: RequestContext) => Promise<{
      status: number; body?: unknown; headers?: Record<string, string>; contentType?: string;
    }>;
    const result = await handler(input, ctx);
    if (meta.audit && !ctx.wrote && result.status < 300) {
      throw new Error(`${operationId} succeeded without ctx.write(): its change has no audit entry.`);
    }
    if (deps.config.validateResponses === 'log' && (result.contentType === undefined || result.contentType.endsWith('json'))) {
      const check = api.validateResponse(result.body, c.operation, result.status);
      if (check.errors) state.log.warn({ operationId, status: result.status, problems: check.errors }, 'response does not match the spec');
    }
    res.status(result.status);
    for (const [name, value] of Object.entries(result.headers ?? {})) res.setHeader(name, value);
    if (result.body === undefined) res.end();
    else if (result.contentType) res.type(result.contentType).send(result.body);
    else res.json(result.body);
  };
  for (const operationId of Object.keys(operations) as OperationId[]) api.register(operationId, wrap(operationId));

  return {
    operationCount: all.length,
    compileAll() {
      api.validator.preCompileRequestValidators();
      api.validator.preCompileResponseValidators();
      api.validator.preCompileResponseHeaderValidators();
    },
    async handle(req, res) {
      try {
        await api.handleRequest(backendRequest(req), req, res);
      } catch (err) {
        sendError(req, res, err);
      }
    },
  };
}

/** The request as openapi-backend reads it; built once per request. */
function backendRequest(req: ExpressRequest): BackendRequest & { allowed?: string[] } {
  const state = requestState(req);
  state.backendRequest ??= {
    method: req.method,
    path: req.path,
    headers: req.headers as BackendRequest['headers'],
    query: req.query as BackendRequest['query'],
    body: req.body,
  };
  return state.backendRequest;
}
