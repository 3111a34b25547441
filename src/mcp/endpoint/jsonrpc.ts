/**
 * The JSON-RPC side of the MCP endpoint (`/mcp/{mcpId}`), written by hand rather than with the
 * SDK's `Server` + `StreamableHTTPServerTransport` per request: the contract needs things that
 * transport decides for itself (its error bodies and statuses, its own Accept/Content-Type
 * checks before ours, the Mcp-Session-Id it issues in stateful mode, its batch handling, which
 * is not per revision) and it would have to be re-created on every request to stay stateless.
 * The SDK's schemas still check what the upstream answers (CallToolResultSchema in callTool).
 */
import type { ApiError } from '../../http/errors';
import type { RenderedError } from '../../http/area';

/** The current revision: stateless, no handshake, version and capabilities in each request's `_meta` (src/mcp/revision-2026.ts). */
export const MODERN_VERSION = '2026-07-28';
/** The handshake revisions (`initialize`), newest first. */
export const HANDSHAKE_VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26'] as const;
/** Every revision served, newest first (what `server/discover` and UnsupportedProtocolVersionError list). */
export const SUPPORTED_VERSIONS = [MODERN_VERSION, ...HANDSHAKE_VERSIONS] as const;
/** What `initialize` answers when the client asks for a revision it cannot have. */
export const LATEST_VERSION = '2025-11-25';
/** What a missing MCP-Protocol-Version means, as the transport says. */
export const DEFAULT_VERSION = '2025-03-26';

export type JsonRpcId = string | number;

export interface JsonRpcRequest {
  jsonrpc: '2.0';
  id: JsonRpcId;
  method: string;
  params?: Record<string, unknown>;
}

export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;
export const SERVER_ERROR = -32000;
/** 2026-07-28: the MCP-Protocol-Version, Mcp-Method or Mcp-Name header is missing or differs from the body. */
export const HEADER_MISMATCH = -32020;
/** 2026-07-28: the request's revision is not one this server speaks; `data` lists the supported ones. */
export const UNSUPPORTED_PROTOCOL_VERSION = -32022;

/** The error codes this endpoint answers with (the spec's JsonRpcErrorResponse lists them). */
export type JsonRpcErrorCode =
  | typeof PARSE_ERROR
  | typeof INVALID_REQUEST
  | typeof METHOD_NOT_FOUND
  | typeof INVALID_PARAMS
  | typeof INTERNAL_ERROR
  | typeof SERVER_ERROR
  | typeof HEADER_MISMATCH
  | typeof UNSUPPORTED_PROTOCOL_VERSION;

/** A JSON-RPC error response; `id` null is what the handshake revisions' transport sends when it read no request id. */
export function errorResponse(id: JsonRpcId | null, code: JsonRpcErrorCode, message: string, data?: unknown) {
  return { jsonrpc: '2.0' as const, id, error: { code, message, ...(data === undefined ? {} : { data }) } };
}

/** A JSON-RPC error response to no request id that was read: without `id`, as the 2026-07-28 revision answers. */
export function unreadErrorResponse(code: JsonRpcErrorCode, message: string, data?: unknown) {
  return { jsonrpc: '2.0' as const, error: { code, message, ...(data === undefined ? {} : { data }) } };
}

export function resultResponse(id: JsonRpcId, result: Record<string, unknown>) {
  return { jsonrpc: '2.0' as const, id, result };
}

export type ClientMessage =
  { kind: 'request'; request: JsonRpcRequest } | { kind: 'notification'; method: string; params: Record<string, unknown> } | { kind: 'response' };

/** Sorts one message (already checked against McpClientMessage by the router's validation). */
export function classify(message: Record<string, unknown>): ClientMessage {
  if (typeof message.method === 'string') {
    const params = (message.params ?? {}) as Record<string, unknown>;
    if (message.id === undefined) return { kind: 'notification', method: message.method, params };
    return { kind: 'request', request: { jsonrpc: '2.0', id: message.id as JsonRpcId, method: message.method, params } };
  }
  return { kind: 'response' };
}

/** The bearer challenge of an MCP server's endpoint: where its protected-resource metadata is (RFC 9728). */
export function challenge(baseUrl: string, mcpId: string, error?: { code: string; description: string }): string {
  const metadata = mcpId ? `${baseUrl}/.well-known/oauth-protected-resource/mcp/${mcpId}` : `${baseUrl}/.well-known/oauth-protected-resource`;
  let value = `Bearer resource_metadata="${metadata}", scope="mcp"`;
  // A header value is visible ASCII: quotes and backslashes would end the quoted-string, and a
  // typographic apostrophe (or any other non-ASCII character) is refused by Node outright.
  if (error)
    value += `, error="${error.code}", error_description="${error.description
      .replace(/[\u2018\u2019]/g, "'")
      .replace(/["\\]/g, "'")
      .replace(/[^\x20-\x7e]/g, '?')}"`;
  return value;
}

/**
 * The endpoint's errors in its own format: bearer errors (RFC 6750) for 401, JSON-RPC error
 * objects for everything else the router or guard refuses. Those come before the body is read,
 * so they answer as the current revision (2026-07-28) asks of an answer to no readable
 * request, which the older ones leave open: no `id`, and the JSON-RPC 2.0 code that fits
 * rather than -32000, which that revision keeps for implementations older than it.
 */
export function renderMcpError(error: ApiError, requestId: string, path: string, baseUrl: string): RenderedError {
  // Only an id of the right form is repeated (the path may be anything, even broken percent-encoding).
  const last = path.split('/').pop() ?? '';
  const mcpId = /^mcp_[0-9a-z]{26}$/.test(last) ? last : '';
  const json = (status: number, code: JsonRpcErrorCode, message: string, headers: Record<string, string> = {}): RenderedError => ({
    status,
    contentType: 'application/json',
    body: unreadErrorResponse(code, message, { request_id: requestId }),
    headers: { ...error.options.headers, ...headers },
  });
  switch (error.status) {
    case 401: {
      const sent = error.code === 'invalid_token';
      const description = sent ? error.detail : 'No bearer token was sent.';
      return {
        status: 401,
        contentType: 'application/json',
        body: { error: 'invalid_token', error_description: description },
        headers: { 'WWW-Authenticate': challenge(baseUrl, mcpId, sent ? { code: 'invalid_token', description } : undefined) },
      };
    }
    case 400: {
      if (error.code === 'malformed_json') return json(400, PARSE_ERROR, `Parse error: ${error.detail}`);
      const problems = error.options.errors ?? [];
      // A well-formed revision this server does not speak reaches the handler (-32022 there);
      // a value that cannot be one is a malformed header, as the revision names that.
      if (problems.some((p) => p.in === 'header' && /protocol-version/i.test(p.pointer))) {
        return json(
          400,
          HEADER_MISMATCH,
          `Header mismatch: the MCP-Protocol-Version header is not a protocol revision (supported versions: ${SUPPORTED_VERSIONS.join(', ')})`,
        );
      }
      if (problems.some((p) => p.in === 'path')) return json(400, INVALID_REQUEST, 'Bad Request: the path does not name an MCP server (mcp_…)');
      return json(400, INVALID_REQUEST, 'Invalid Request: the body is not a JSON-RPC 2.0 message (or batch) this server takes');
    }
    case 403:
      return json(403, INVALID_REQUEST, `Forbidden: ${error.detail}`);
    case 404:
      return json(404, INVALID_REQUEST, mcpId ? `Not Found: no MCP server ${mcpId}` : 'Not Found: no such MCP server');
    case 405:
      return json(405, INVALID_REQUEST, 'Method Not Allowed: this endpoint takes POST (and DELETE); the server sends no messages of its own');
    case 413:
      return json(413, INVALID_REQUEST, `Payload Too Large: ${error.detail}`);
    case 415:
      return json(415, INVALID_REQUEST, 'Unsupported Media Type: Content-Type must be application/json');
    case 429:
      return json(429, INVALID_REQUEST, `Too Many Requests: ${error.detail}`);
    case 503:
      return json(503, INTERNAL_ERROR, `Service Unavailable: ${error.detail}`);
    default:
      return json(error.status, error.status >= 500 ? INTERNAL_ERROR : INVALID_REQUEST, error.detail);
  }
}
