import type { Readable } from 'node:stream';
import type { operations as Operations } from '../../generated/openapi';
import type { OperationId, Tag, operations as table } from '../../generated/operations';
import type { ValidationProblem } from './errors';
import type { Representation } from './representation';

/**
 * The handler contract, typed from the spec: what a handler receives (path, query and header
 * parameters, and a body of whichever media type the operation accepts) and what it may
 * return (one of the operation's success responses, as JSON, text, bytes, a stream or
 * server-sent events). Errors are thrown (ApiError) and rendered once, by the router.
 */

type Op<K extends OperationId> = Operations[K];
type Meta<K extends OperationId> = (typeof table)[K];
type Group<T> = [T] extends [undefined] ? Record<string, never> : [T] extends [never] ? Record<string, never> : NonNullable<T>;
type Params<K extends OperationId> = Op<K> extends { parameters: infer P } ? P : Record<string, never>;
/** Declared keys only: openapi-typescript adds `[name: string]: unknown` to header maps. */
type KnownKeys<T> = keyof { [P in keyof T as string extends P ? never : number extends P ? never : P]: T[P] };

/** A multipart part that carried bytes: spooled to a temporary file under the size cap, removed after the response. */
export interface UploadedFile {
  filename: string | null;
  contentType: string;
  size: number;
  /** Reads the bytes again, as many times as needed. */
  open(): Readable;
}

/**
 * A raw request body (`application/octet-stream`, `image/png`, …), read as it arrives and
 * never held whole in memory. It fails with 413 `payload_too_large` past the operation's cap.
 */
export interface UploadStream extends Readable {
  readonly contentType: string;
  /** The declared length, when the client sent Content-Length. */
  readonly declaredLength: number | null;
}

type FileParts<K extends OperationId> = Meta<K>['fileParts'][number];
type MultipartBody<S, F extends PropertyKey> = [F] extends [never] ? S : Omit<S, F> & { [P in F & keyof S]: UploadedFile };
type BodyOf<K extends OperationId, M, S> = M extends `${string}json` | 'application/x-www-form-urlencoded'
  ? S
  : M extends 'multipart/form-data'
    ? MultipartBody<S, FileParts<K>>
    : UploadStream;
type RequestContent<K extends OperationId> = Op<K>['requestBody'] extends infer B ? (B extends { content: infer C } ? C : never) : never;
type Body<K extends OperationId> = [RequestContent<K>] extends [never]
  ? undefined
  : | { [M in keyof RequestContent<K> & string]: BodyOf<K, M, RequestContent<K>[M]> }[keyof RequestContent<K> & string]
    | (undefined extends Op<K>['requestBody'] ? undefined : never);

/** What a handler receives: parameters validated (and coerced) against the spec, and the body. */
export interface OperationInput<K extends OperationId> {
  params: Group<Params<K> extends { path?: infer X } ? X : undefined>;
  query: Group<Params<K> extends { query?: infer X } ? X : undefined>;
  /** The header parameters the operation declares, named as the spec names them. */
  headers: Group<Params<K> extends { header?: infer X } ? X : undefined>;
  body: Body<K>;
}

/** One thing wrong with a request, where and why (the Error object's `errors` items). */
export type Problem = ValidationProblem;

/** A protocol operation's request as it arrived: path and query parameters uncoerced, declared headers, the body as read. */
export interface RawInput {
  params: Record<string, unknown>;
  query: Record<string, unknown>;
  headers: Record<string, string | undefined>;
  body: unknown;
}

/**
 * What the handler of a protocol operation (`x-protocol`) receives: the validated input, or
 * the problems found with the request as it arrived, so that it can answer in its protocol
 * (src/http/protocol.ts turns problems into that answer). Unknown parameters and body members
 * never count as problems there.
 */
export type ProtocolInput<T> = { valid: true; value: T } | { valid: false; problems: Problem[]; raw: RawInput };

/** One message of a `text/event-stream` response; an object `data` is sent as JSON. */
export interface ServerSentEvent {
  event?: string;
  id?: string;
  data: string | object;
}

type Responses<K extends OperationId> = Op<K>['responses'];
type SuccessStatus<K extends OperationId> = Extract<keyof Responses<K>, 200 | 201 | 202 | 204 | 206 | 301 | 302 | 303 | 307 | 308>;
/** The response headers the spec declares (X-Request-Id is the router's); several values for one header are sent as several lines. */
type ResultHeaders<R> = R extends { headers: infer H }
  ? { [N in Exclude<KnownKeys<H>, 'X-Request-Id'>]?: string | number | readonly string[] }
  : Record<string, never>;
type Variant<S, M, B, H> = M extends 'text/event-stream'
  ? { status: S; events: AsyncIterable<ServerSentEvent>; headers?: H }
  : M extends `${string}json`
    ? { status: S; body: B; headers?: H; contentType?: M }
    : { status: S; body: string | Uint8Array | Readable; contentType: string; contentLength?: number; headers?: H };
/**
 * Bytes that stay the same until replaced (a document, a logo): sent with an ETag, 304 when the
 * client holds them, compressed when that pays (representation.ts). Its type must be one the
 * response declares.
 */
type Stored<S, R> = R extends { content: unknown } ? { status: S; representation: Representation; headers?: ResultHeaders<R> } : never;
type ResultOf<S, R> = R extends { content: infer C }
  ? { [M in keyof C & string]: Variant<S, M, C[M], ResultHeaders<R>> }[keyof C & string] | Stored<S, R>
  : { status: S; body?: undefined; headers?: ResultHeaders<R> };

/** What a handler returns: one of the operation's success responses. */
export type OperationResult<K extends OperationId> = { [S in SuccessStatus<K>]: ResultOf<S, Responses<K>[S]> }[SuccessStatus<K>];

type DeclaredStatus<K extends OperationId> = Extract<keyof Responses<K>, number>;
/** What a protocol operation's handler returns: any response its spec declares, errors included (they are its protocol's). */
export type ProtocolResult<K extends OperationId> = { [S in DeclaredStatus<K>]: ResultOf<S, Responses<K>[S]> }[DeclaredStatus<K>];

/** Any handler's result, as the router sends it. */
export type AnyResult = {
  status: number;
  body?: unknown;
  headers?: Record<string, string | number | readonly string[]>;
  contentType?: string;
  contentLength?: number;
  events?: AsyncIterable<ServerSentEvent>;
  representation?: Representation;
};

/** A handler of one operation; a protocol operation's (`x-protocol`) takes its problems too and may answer any status it declares. */
export type OperationHandler<K extends OperationId, Ctx> = Meta<K>['protocol'] extends null
  ? (input: OperationInput<K>, ctx: Ctx) => Promise<OperationResult<K>>
  : (input: ProtocolInput<OperationInput<K>>, ctx: Ctx) => Promise<ProtocolResult<K>>;

/** Operations served by an engine mounted beside the router: no handler may claim them. */
export type EngineOperationId = { [K in OperationId]: Meta<K>['engine'] extends null ? never : K }[OperationId];
export type OperationsOfTag<T extends Tag> = { [K in OperationId]: Meta<K>['tag'] extends T ? K : never }[OperationId];

/** The handlers of one tag's area: any subset of its operations (the rest answer 501). */
export type AreaHandlers<T extends Tag, Ctx> = { [K in Exclude<OperationsOfTag<T>, EngineOperationId>]?: OperationHandler<K, Ctx> };

/** The handlers of a module that is not one tag's area (a protocol endpoint): any operations, typed by id. */
export type ModuleHandlers<Ctx> = { [K in Exclude<OperationId, EngineOperationId>]?: OperationHandler<K, Ctx> };
