import { defineArea } from '../../http/area';
import { ApiError, validationError } from '../../http/errors';
import { SUPPORTED_SCOPES } from '../../protocols/oauth-server/clients';
import { signingKeysOf } from '../../protocols/oauth-server/keys';

/**
 * The tag "OAuth discovery": the protected-resource metadata documents (RFC 9728) the MCP
 * endpoint's 401 leads clients to, the authorization server's metadata (RFC 8414, and the same
 * as OpenID Connect discovery for clients that look there; one `issuer`), and its keys.
 */
const PUBLIC_HEADERS = { 'Cache-Control': 'public, max-age=3600', 'Access-Control-Allow-Origin': '*' } as const;
// Both documents are public (CORS `*`): anyone who has an MCP server's id can read its
// document, so neither names anything of an organization's, only the service.
const RESOURCE_NAME = 'MCP control plane';

/** RFC 8414 §2, every URL from BASE_URL (never from request headers). */
function serverMetadata(base: string) {
  return {
    issuer: base,
    authorization_endpoint: `${base}/oauth/authorize`,
    token_endpoint: `${base}/oauth/token`,
    registration_endpoint: `${base}/oauth/register`,
    revocation_endpoint: `${base}/oauth/revoke`,
    userinfo_endpoint: `${base}/oauth/userinfo`,
    jwks_uri: `${base}/oauth/jwks`,
    scopes_supported: [...SUPPORTED_SCOPES],
    response_types_supported: ['code' as const],
    response_modes_supported: ['query' as const],
    grant_types_supported: ['authorization_code' as const, 'refresh_token' as const],
    code_challenge_methods_supported: ['S256' as const],
    token_endpoint_auth_methods_supported: ['none' as const, 'client_secret_basic' as const, 'client_secret_post' as const],
    revocation_endpoint_auth_methods_supported: ['none' as const, 'client_secret_basic' as const, 'client_secret_post' as const],
    authorization_response_iss_parameter_supported: true as const,
    client_id_metadata_document_supported: true as const,
    service_documentation: `${base}/schema/openapi.json`,
  };
}

export default defineArea({
  tag: 'OAuth discovery',
  handlers: {
    async getOAuthAuthorizationServerMetadata(_input, ctx) {
      return { status: 200, headers: PUBLIC_HEADERS, body: serverMetadata(ctx.deps.config.baseUrl) };
    },
    async getOpenIdConfiguration(_input, ctx) {
      return {
        status: 200,
        headers: PUBLIC_HEADERS,
        body: {
          ...serverMetadata(ctx.deps.config.baseUrl),
          subject_types_supported: ['public' as const],
          id_token_signing_alg_values_supported: ['ES256' as const],
          claims_supported: ['sub', 'iss', 'aud', 'exp', 'iat', 'auth_time', 'nonce', 'name', 'email', 'email_verified'],
        },
      };
    },
    async getOAuthJwks(_input, ctx) {
      return { status: 200, headers: PUBLIC_HEADERS, body: { keys: await signingKeysOf(ctx.deps).published() } };
    },
    async getOAuthProtectedResourceMetadata(_input, ctx) {
      const base = ctx.deps.config.baseUrl;
      return {
        status: 200,
        headers: PUBLIC_HEADERS,
        body: {
          resource: base,
          authorization_servers: [base],
          scopes_supported: ['mcp'],
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
          scopes_supported: ['mcp'],
          bearer_methods_supported: ['header'],
          resource_name: RESOURCE_NAME,
          resource_documentation: `${base}/schema/openapi.json`,
        },
      };
    },
  },
});
