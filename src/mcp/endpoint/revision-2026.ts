/**
 * MCP revision 2026-07-28 on the endpoint (spec/paths/mcp.yml, "Revision 2026-07-28"): which
 * era a POST speaks, the checks that revision asks of each request (per-request `_meta`, the
 * mirrored headers), and the members it adds to results (`resultType`, `_meta` serverInfo,
 * cache hints). Pure functions: the handler decides what to run.
 */
import {
  DEFAULT_VERSION,
  errorResponse,
  HANDSHAKE_VERSIONS,
  HEADER_MISMATCH,
  INVALID_PARAMS,
  MODERN_VERSION,
  SUPPORTED_VERSIONS,
  UNSUPPORTED_PROTOCOL_VERSION,
  unreadErrorResponse,
  type JsonRpcErrorCode,
  type JsonRpcId,
} from './jsonrpc';

export const META_VERSION = 'io.modelcontextprotocol/protocolVersion';
export const META_CAPABILITIES = 'io.modelcontextprotocol/clientCapabilities';
export const META_SERVER_INFO = 'io.modelcontextprotocol/serverInfo';

/** Cache hints (ttlMs): the tools follow the connections' tool caches and restrictions, so a minute; discover changes only with the server's name. */
export const TOOLS_LIST_TTL_MS = 60_000;
export const DISCOVER_TTL_MS = 300_000;

export type Era =
  | { era: 'handshake'; version: string }
  | { era: 'modern' }
  /** The request is refused before it runs: the HTTP status and the JSON-RPC error response. */
  | { era: 'refused'; status: 400 | 404; body: ReturnType<typeof errorResponse> | ReturnType<typeof unreadErrorResponse> };

interface Headers {
  version: string | undefined;
  method: string | undefined;
  name: string | undefined;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The `_meta` of a single message, when it has one. */
function metaOf(message: unknown): Record<string, unknown> | undefined {
  if (!isObject(message) || !isObject(message.params)) return undefined;
  const meta = message.params._meta;
  return isObject(meta) ? meta : undefined;
}

/** `=?base64?…?=` (the transport's sentinel for values that are not plain ASCII) decoded; anything else as sent. */
export function decodeHeaderValue(value: string): string {
  const match = /^=\?base64\?([A-Za-z0-9+/=]*)\?=$/.exec(value);
  return match ? Buffer.from(match[1] as string, 'base64').toString('utf8') : value;
}

const versionMismatch = (header: string, metaVersion: unknown) =>
  `Header mismatch: MCP-Protocol-Version header value '${header}' does not match _meta value '${String(metaVersion)}'`;

/**
 * Which era the POST speaks, and whether a 2026-07-28 request may run. A `MCP-Protocol-Version`
 * of a handshake revision (or none, on a body without 2026-07-28 `_meta`) is the handshake era,
 * as before. A header of 2026-07-28 is the current era, with its checks. Any other header is
 * refused with UnsupportedProtocolVersionError, naming the revisions served and the one asked
 * for, whether or not the body's `_meta` names one too (the handshake revisions ask only for a
 * 400, which this is). A refusal carries the request's id, or none when no request was read.
 */
export function eraOf(headers: Headers, body: unknown, requestId: string): Era {
  const single = Array.isArray(body) ? undefined : body;
  const meta = metaOf(single);
  const metaVersion = meta?.[META_VERSION];
  const id: JsonRpcId | null = isObject(single) && (typeof single.id === 'string' || typeof single.id === 'number') ? single.id : null;
  const isRequest = id !== null && isObject(single) && typeof single.method === 'string';
  const refuse = (status: 400 | 404, code: JsonRpcErrorCode, message: string, data: Record<string, unknown> = {}, to: JsonRpcId | null = id): Era => ({
    era: 'refused',
    status,
    body:
      to === null
        ? unreadErrorResponse(code, message, { ...data, request_id: requestId })
        : errorResponse(to, code, message, { ...data, request_id: requestId }),
  });
  const header = headers.version;

  if (header !== undefined && (HANDSHAKE_VERSIONS as readonly string[]).includes(header)) {
    // A client speaking 2026-07-28 in _meta must say so in the header too (the revision's MUST).
    if (isRequest && metaVersion !== undefined && metaVersion !== header) {
      return refuse(400, HEADER_MISMATCH, versionMismatch(header, metaVersion));
    }
    return { era: 'handshake', version: header };
  }
  if (header === undefined) {
    if (isRequest && metaVersion !== undefined) {
      return refuse(400, HEADER_MISMATCH, `Header mismatch: MCP-Protocol-Version header is missing; _meta names ${String(metaVersion)}`);
    }
    return { era: 'handshake', version: DEFAULT_VERSION };
  }
  if (header !== MODERN_VERSION) {
    return refuse(400, UNSUPPORTED_PROTOCOL_VERSION, 'Unsupported protocol version', { supported: [...SUPPORTED_VERSIONS], requested: header });
  }

  // 2026-07-28. Notifications and responses carry no required headers or _meta in this revision.
  if (!isRequest) return { era: 'modern' };
  const request = single as { method: string; params?: Record<string, unknown> };
  if (metaVersion === undefined || !isObject(meta?.[META_CAPABILITIES])) {
    const missing = [metaVersion === undefined ? META_VERSION : null, !isObject(meta?.[META_CAPABILITIES]) ? META_CAPABILITIES : null]
      .filter(Boolean)
      .join(' and ');
    return refuse(400, INVALID_PARAMS, `Invalid params: _meta lacks ${missing}, which every ${MODERN_VERSION} request carries`);
  }
  if (metaVersion !== header) {
    if (typeof metaVersion === 'string' && !(SUPPORTED_VERSIONS as readonly string[]).includes(metaVersion)) {
      return refuse(400, UNSUPPORTED_PROTOCOL_VERSION, 'Unsupported protocol version', { supported: [...SUPPORTED_VERSIONS], requested: metaVersion });
    }
    return refuse(400, HEADER_MISMATCH, versionMismatch(header, metaVersion));
  }
  if (headers.method === undefined) return refuse(400, HEADER_MISMATCH, 'Header mismatch: the Mcp-Method header is missing');
  if (headers.method !== request.method) {
    return refuse(400, HEADER_MISMATCH, `Header mismatch: Mcp-Method header value '${headers.method}' does not match body value '${request.method}'`);
  }
  if (request.method === 'tools/call') {
    const name = request.params?.name;
    if (headers.name === undefined) return refuse(400, HEADER_MISMATCH, 'Header mismatch: the Mcp-Name header is missing');
    const sent = decodeHeaderValue(headers.name);
    if (typeof name === 'string' && sent !== name) {
      return refuse(400, HEADER_MISMATCH, `Header mismatch: Mcp-Name header value '${sent}' does not match body value '${name}'`);
    }
  }
  return { era: 'modern' };
}

export interface ServerInfo {
  name: string;
  title?: string;
  version: string;
}

type Response = { jsonrpc: '2.0'; id: JsonRpcId | null; result?: Record<string, unknown>; error?: unknown };

/**
 * A response as 2026-07-28 answers it: a result gains `resultType: complete` and the server's
 * name in `_meta` (beside whatever `_meta` the upstream sent), plus cache hints when given.
 * Errors pass unchanged.
 */
export function modernResponse<R extends Response>(response: R, serverInfo: ServerInfo, cache?: { ttlMs: number }): R {
  if (!response.result) return response;
  const result = response.result;
  const meta = isObject(result._meta) ? result._meta : {};
  return {
    ...response,
    result: {
      ...result,
      resultType: 'complete',
      _meta: { ...meta, [META_SERVER_INFO]: serverInfo },
      ...(cache ? { ttlMs: cache.ttlMs, cacheScope: 'private' } : {}),
    },
  };
}

/**
 * A tool definition as 2026-07-28 lists it: without the `x-mcp-header` annotations an upstream
 * may put in its `inputSchema`. Those ask the client to mirror arguments into `Mcp-Param-*`
 * headers for the upstream's own transport; this server designates no argument for that (its
 * hop to the upstream is its own), so the client sends none and none need checking.
 */
export function withoutHeaderMirroring<T extends { inputSchema: unknown }>(tool: T): T {
  if (!JSON.stringify(tool.inputSchema ?? null).includes('"x-mcp-header"')) return tool;
  const strip = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(strip);
    if (!isObject(node)) return node;
    return Object.fromEntries(
      Object.entries(node)
        .filter(([key]) => key !== 'x-mcp-header')
        .map(([key, value]) => [key, strip(value)]),
    );
  };
  return { ...tool, inputSchema: strip(tool.inputSchema) };
}
