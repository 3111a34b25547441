import { defineArea } from '../../http/area';
import { ApiError, validationError } from '../../http/errors';

/**
 * The tag "OAuth discovery": for now only the two protected-resource metadata documents
 * (RFC 9728) that the MCP endpoint's 401 leads clients to; the authorization-server metadata,
 * OpenID configuration and JWKS come with the OAuth server (they answer 501 until then).
 */
const PUBLIC_HEADERS = { 'Cache-Control': 'public, max-age=3600', 'Access-Control-Allow-Origin': '*' } as const;
// Both documents are public (CORS `*`): anyone who has an MCP server's id can read its
// document, so neither names anything of an organization's, only the service.
const RESOURCE_NAME = 'MCP control plane';

export default defineArea({
  tag: 'OAuth discovery',
  handlers: {
    async getOAuthProtectedResourceMetadata(_input, ctx) {
      const base = ctx.deps.config.baseUrl;
      return {
        status: 200,
        headers: PUBLIC_HEADERS,
        body: {
          resource: base,
          authorization_servers: [base],
          scopes_supported: ['mcp', 'offline_access'],
          bearer_methods_supported: ['header'],
          resource_name: RESOURCE_NAME,
          resource_documentation: `${base}/schema/openapi.json`,
        },
      };
    },
    async getMcpServerProtectedResourceMetadata(input, ctx) {
      // RFC 9728 defines no error format: a malformed id is refused as any other request is.
      if (!input.valid) throw validationError(input.problems);
      const { params } = input.value;
      const base = ctx.deps.config.baseUrl;
      const server = await ctx.db.selectFrom('mcp_servers').select('id').where('id', '=', params.mcpId).executeTakeFirst();
      if (!server) throw new ApiError('not_found', `No MCP server ${params.mcpId}.`);
      return {
        status: 200,
        headers: PUBLIC_HEADERS,
        body: {
          resource: `${base}/mcp/${server.id}`,
          authorization_servers: [base],
          scopes_supported: ['mcp', 'offline_access'],
          bearer_methods_supported: ['header'],
          resource_name: RESOURCE_NAME,
          resource_documentation: `${base}/schema/openapi.json`,
        },
      };
    },
  },
});
