import { mcpServerTokenAuthenticator } from '../../auth/mcp-tokens';
import { defineArea } from '../../http/area';
import { ApiError } from '../../http/errors';
import { keyedPageRequest } from '../../http/pagination';
import { closeUpstreamPool } from '../../lib/mcp-upstream-pool';
import { renderMcpError } from '../../mcp/jsonrpc';
import { mcpEndpointHandlers } from './mcp-endpoint.handlers';
import { touches } from '../../db/written-tables';
import { forgetServedTools, SERVED_TOOLS_TABLES, startServedTools, stopServedTools } from './served-tools';
import { flushToolCallRecords } from './tool-call-records';
import { mcpServerHandlers } from './mcp-servers.handlers';
import * as userToolboxes from './user-toolboxes.service';

userToolboxes.registerMemberHooks();

const MCP_ENDPOINT = new Set(['postMcpMessage', 'deleteMcpSession']);
/** The configuration, known once the app starts: the endpoint's 401 names its metadata document by the public URL. */
let config: { baseUrl: string } = { baseUrl: '' };

/**
 * The tag "MCP control plane": user toolboxes, their MCP servers
 * (mcp-servers.handlers.ts), whose token scheme `mcpToken` this area authenticates, and the MCP
 * endpoint `/mcp/{mcpId}` those servers serve (mcp-endpoint.handlers.ts, src/mcp/).
 */
export default defineArea({
  tag: 'MCP control plane',
  authenticators: { mcpToken: mcpServerTokenAuthenticator },
  start: async (deps) => {
    config = deps.config;
    await startServedTools(deps);
  },
  // The tool-call records still being written, then the upstream sessions the endpoint kept open (src/lib/mcp-upstream-pool.ts).
  stop: async (deps) => {
    await stopServedTools(deps.config);
    await flushToolCallRecords(deps.db);
    await closeUpstreamPool(deps.config);
  },
  // What the MCP endpoint remembers of its servers' tools (served-tools.ts) forgets this process's changes at once.
  afterCommit: (deps, change) => {
    if (touches(change, SERVED_TOOLS_TABLES)) forgetServedTools(deps.config, change.scope);
  },
  // A foreign Origin is refused before the token is looked at (and before the rate limit counts it).
  beforeAuthentication: (operationId, headers, deps) => {
    if (!MCP_ENDPOINT.has(operationId)) return;
    const origin = headers.origin;
    if (origin === undefined || origin === new URL(deps.config.baseUrl).origin || deps.config.mcpAllowedOrigins.includes(origin)) return;
    throw new ApiError('insufficient_access', `Origin ${origin.slice(0, 300)} is not allowed`);
  },
  // The MCP endpoint answers in its own format (bearer errors, JSON-RPC error objects); the rest of the tag keeps the Error object.
  renderError: (error, operationId, requestId, path) => (MCP_ENDPOINT.has(operationId) ? renderMcpError(error, requestId, path, config.baseUrl) : null),
  handlers: {
    ...mcpServerHandlers,
    ...mcpEndpointHandlers,
    async listUserToolboxes({ query }, ctx) {
      const page = keyedPageRequest(query, (id) => userToolboxes.USER_TOOLBOX_ID.test(id));
      return { status: 200, body: await userToolboxes.list(ctx, page, { kind: query.kind, template_id: query.template_id }) };
    },
    async createUserToolbox({ body }, ctx) {
      const created = await userToolboxes.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/user-toolbox/${created.id}` } };
    },
    async getUserToolbox({ params }, ctx) {
      return { status: 200, body: await userToolboxes.get(ctx, params.id) };
    },
    async updateUserToolbox({ params, body }, ctx) {
      return { status: 200, body: await userToolboxes.update(ctx, params.id, body) };
    },
    async deleteUserToolbox({ params }, ctx) {
      await userToolboxes.remove(ctx, params.id);
      return { status: 204 };
    },
  },
});
