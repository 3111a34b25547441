import { touches } from '../../db/written-tables';
import { defineModule } from '../../http/area';
import { ApiError } from '../../http/errors';
import { mcpServerTokenAuthenticator } from '../../identity/mcp-tokens';
import { SERVED_TOOLS_TABLES } from '../served-tools';
import { mcpEndpointHandlers } from './handlers';
import { renderMcpError } from './jsonrpc';

/**
 * The MCP endpoint `/mcp/{mcpId}` (spec/paths/mcp.yml): JSON-RPC per protocol revision over
 * Streamable HTTP, authenticated by MCP server tokens (`mcpToken`), answering in its own
 * format. Its long-lived state is the app's McpRuntime (`deps.mcp`), started and closed here.
 */
export default defineModule({
  name: 'MCP endpoint',
  handlers: mcpEndpointHandlers,
  authenticators: { mcpToken: mcpServerTokenAuthenticator },
  start: (deps) => deps.mcp.start(deps),
  // The tool-call records still being written, then the upstream sessions the endpoint kept open.
  stop: (deps) => deps.mcp.close(),
  // What the endpoint remembers of its servers' tools forgets this process's changes at once.
  afterCommit: (deps, change) => {
    if (touches(change, SERVED_TOOLS_TABLES)) deps.mcp.servedTools.forget(change.scope);
  },
  // A foreign Origin is refused before the token is looked at (and before the rate limit counts it).
  beforeAuthentication: (_operationId, headers, deps) => {
    const origin = headers.origin;
    if (origin === undefined || origin === new URL(deps.config.baseUrl).origin || deps.config.mcpAllowedOrigins.includes(origin)) return;
    throw new ApiError('insufficient_access', `Origin ${origin.slice(0, 300)} is not allowed`);
  },
  // Bearer errors and JSON-RPC error objects instead of the Error object (the registry asks only for this module's operations).
  renderError: (error, _operationId, requestId, path, deps) => renderMcpError(error, requestId, path, deps.config.baseUrl),
});
