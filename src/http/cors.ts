// Cross-origin access for the paths the spec marks `x-cors: true` (/oauth/*, /.well-known/*,
// /mcp/{mcpId}): browser-based MCP clients discover, authorize and connect from pages of their
// own origin. Every other path stays same-origin only.
//
// Any origin is allowed (`*`, never with credentials): these paths take bearer tokens, not
// cookies, so a page of another origin gains nothing it could not do from its own server. The
// MCP endpoints keep refusing an Origin that is not allowed (DNS-rebinding protection, the
// transport's requirement): the router runs the area's beforeAuthentication check on the
// preflight as on the request itself, so a foreign page's preflight fails with 403 and its
// browser never sends the request.
import type { Response } from 'express';

/** The request headers a browser may send on these paths: MCP's Streamable HTTP transport and OAuth's. */
export const CORS_ALLOW_HEADERS = [
  'Authorization',
  'Content-Type',
  'MCP-Protocol-Version',
  'Mcp-Method',
  'Mcp-Name',
  'Mcp-Session-Id',
  'Last-Event-ID',
  'X-Request-Id',
].join(', ');
/** The response headers a page may read: the bearer challenge leads to the metadata, Retry-After paces retries. */
export const CORS_EXPOSE_HEADERS = ['WWW-Authenticate', 'Mcp-Session-Id', 'Retry-After', 'X-Request-Id'].join(', ');
/** How long a browser may reuse a preflight's answer (Chromium caps it at 2 hours, Firefox at 24). */
export const CORS_MAX_AGE_SECONDS = 7200;

/** Marks an actual response of an `x-cors` path as readable by pages of any origin. */
export function allowCrossOrigin(res: Response): void {
  res.setHeader('Access-Control-Allow-Origin', '*');
  res.setHeader('Access-Control-Expose-Headers', CORS_EXPOSE_HEADERS);
}

/** Answers a preflight (or any OPTIONS) of an `x-cors` path: 204, with the path's methods. */
export function answerPreflight(res: Response, methods: readonly string[]): void {
  res.setHeader('Access-Control-Allow-Origin', '*');
  res.setHeader('Access-Control-Allow-Methods', methods.join(', '));
  res.setHeader('Access-Control-Allow-Headers', CORS_ALLOW_HEADERS);
  res.setHeader('Access-Control-Max-Age', String(CORS_MAX_AGE_SECONDS));
  res.setHeader('Allow', [...methods, 'OPTIONS'].join(', '));
  res.status(204).end();
}
