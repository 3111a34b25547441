/**
 * One typed way to call the API in tests, keyed by operationId:
 *
 *   const res = await t.as(org).op('createTeam', { body: { name: 'Platform' } });
 *   expect(res.status).toBe(201);
 *   res.body.id;                                   // typed: components['schemas']['Team']
 *   expectError(await t.as(org).op('getTeam', { params: { id } }), 404, 'not_found');
 *
 * `params` are the path parameters, `query` the query parameters and `body` the JSON body,
 * each typed from generated/openapi.d.ts (a wrong operation id, a missing path parameter or a
 * body of the wrong shape does not compile). The organization header comes from the caller
 * (`as`), so tests do not repeat it. Every response goes through TestApp.call, which checks
 * it against the spec. For requests the spec forbids (a wrong type, an unknown member), use
 * `t.as(who).post(path, body)` and friends: they are untyped on purpose.
 */
import type { components, operations } from '../../generated/openapi';
import { operations as META } from '../../generated/operations';
import type { CallOptions, TestResponse } from './app';

export type OperationId = keyof operations;
type Op<Id extends OperationId> = operations[Id];
type ParametersOf<Id extends OperationId> = Op<Id> extends { parameters: infer P } ? P : never;
type Part<Id extends OperationId, K extends string> = ParametersOf<Id> extends { [key in K]?: infer X } ? X : never;
type Present<X> = [X] extends [never] ? false : [X] extends [undefined] ? false : true;

type JsonBody<Id extends OperationId> = Op<Id> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;
type BodyRequired<Id extends OperationId> = Op<Id> extends { requestBody: { content: { 'application/json': unknown } } } ? true : false;

/** What `op` takes: path parameters, query parameters, a JSON body, and extra headers. */
export type OpRequest<Id extends OperationId> = (Present<Part<Id, 'path'>> extends true ? { params: NonNullable<Part<Id, 'path'>> } : { params?: undefined }) &
  (Present<Part<Id, 'query'>> extends true ? { query?: NonNullable<Part<Id, 'query'>> } : { query?: undefined }) &
  (Present<JsonBody<Id>> extends true ? (BodyRequired<Id> extends true ? { body: JsonBody<Id> } : { body?: JsonBody<Id> }) : { body?: undefined }) & {
    /** Further headers (If-None-Match, Idempotency-Key…). */
    headers?: Record<string, string>;
  };

type Responses<Id extends OperationId> = Op<Id> extends { responses: infer R } ? R : never;
type Success<R> = {
  [S in keyof R]: S extends 200 | 201 | 202 | 203 | 206
    ? R[S] extends { content: { 'application/json': infer B } }
      ? B
      : R[S] extends { content: { [type: string]: infer B } }
        ? B
        : undefined
    : never;
}[keyof R];

/** The body of the operation's 2xx JSON responses. */
export type OpBody<Id extends OperationId> = Success<Responses<Id>>;
export type ErrorBody = components['schemas']['Error'];

/** The status, headers and typed body of an answer; `error` is the Error body when the status is 4xx or 5xx. */
export interface OpResponse<Id extends OperationId> extends TestResponse<OpBody<Id>> {
  error: ErrorBody | undefined;
}

/** Who calls: a credential (token or session, and the organization to act in) or a seeded organization (its owner's token). */
export type Who = { token?: string; session?: string; org?: string } | { orgId: string; token: string };

export function credentialOf(who: Who | undefined): CallOptions {
  if (!who) return {};
  if ('orgId' in who) return { token: who.token, org: who.orgId };
  return { token: who.token, session: who.session, org: who.org };
}

/** The request line of an operation: its method and its path with the parameters filled in and the query appended. */
export function requestLine(
  id: OperationId,
  request: { params?: Record<string, unknown>; query?: Record<string, unknown> } = {},
): { method: string; path: string } {
  const meta = META[id];
  if (!meta) throw new Error(`No operation ${String(id)} in the spec.`);
  const path = meta.path.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    const value = request.params?.[name];
    if (value === undefined) throw new Error(`${String(id)} needs the path parameter ${name}.`);
    return encodeURIComponent(String(value));
  });
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(request.query ?? {})) {
    if (value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) query.append(name, String(item));
  }
  const search = query.toString();
  return { method: meta.method.toUpperCase(), path: search === '' ? path : `${path}?${search}` };
}

type Call = <T>(method: string, path: string, body?: unknown, options?: CallOptions) => Promise<TestResponse<T>>;

/** Sends an operation through `call` (which checks the answer against the spec). */
export async function sendOp<Id extends OperationId>(call: Call, id: Id, request: OpRequest<Id> | undefined, who: Who | undefined): Promise<OpResponse<Id>> {
  const { params, query, body, headers } = (request ?? {}) as {
    params?: Record<string, unknown>;
    query?: Record<string, unknown>;
    body?: unknown;
    headers?: Record<string, string>;
  };
  const { method, path } = requestLine(id, { params, query });
  const res = await call<OpBody<Id>>(method, path, body, { ...credentialOf(who), headers: { ...headers } });
  return { ...res, error: res.status >= 400 ? (res.body as unknown as ErrorBody) : undefined };
}

/**
 * The one way tests check a refusal: its status and the Error body's code, the body's own
 * status, and its request_id (the X-Request-Id header's). The spec checker has already held the
 * body to the Error schema.
 */
export function expectError(res: { status: number; body?: unknown; headers?: Headers }, status: number, code: string): void {
  const body = (res.body ?? {}) as { code?: unknown; status?: unknown; request_id?: unknown };
  expect({ status: res.status, code: body.code }).toEqual({ status, code });
  expect(body.status).toBe(status);
  if (res.headers) expect(body.request_id).toBe(res.headers.get('x-request-id'));
}
