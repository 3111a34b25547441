import { defineArea } from '../../http/area';
import { validationError } from '../../http/errors';
import { keyedPageRequest, pageRequest } from '../../http/pagination';
import { connectionHooks } from './connections.hooks';
import { handleCallback } from './connections.oauth';
import * as connections from './connections.service';
import { authorizeContext, credentialsContext, oauthClientContext } from '../../mcp/upstream/credentials';

/** An MCP tool name: what a cursor over an upstream's tools may carry. */
const TOOL_NAME = /^\S{1,512}$/u;

export default defineArea({
  tag: 'Connections',
  hooks: connectionHooks,
  handlers: {
    async listConnections({ query }, ctx) {
      const page = pageRequest(query, 'connection');
      return {
        status: 200,
        body: await connections.list(ctx, page, { connector_slug: query.connector_slug, status: query.status, owner_user_id: query.owner_user_id }),
      };
    },
    async createConnection({ body }, ctx) {
      const created = await connections.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/connection/${created.id}` } };
    },
    async getConnection({ params }, ctx) {
      return { status: 200, body: await connections.get(ctx, params.id) };
    },
    async updateConnection({ params, body }, ctx) {
      return { status: 200, body: await connections.update(ctx, params.id, body) };
    },
    async deleteConnection({ params }, ctx) {
      await connections.remove(ctx, params.id);
      return { status: 204 };
    },
    // An OAuth authorization response: parameters a provider adds (Google's scope and authuser, iss, session_state) are ignored.
    async handleConnectionCallback(input, ctx) {
      if (!input.valid) throw validationError(input.problems);
      const { params, query } = input.value;
      return { status: 302, headers: { Location: await handleCallback(ctx, params.id, query) } };
    },
    async reconnectConnection({ params, body }, ctx) {
      return { status: 200, body: await connections.reconnect(ctx, params.id, body) };
    },
    async listConnectionTools({ params, query }, ctx) {
      const page = keyedPageRequest(query, (name) => TOOL_NAME.test(name));
      const { fetchedAt, stale, ...body } = await connections.listTools(ctx, params.id, page);
      return { status: 200, body, headers: { 'Tools-Fetched-At': fetchedAt.toISOString(), 'Tools-Stale': stale ? 'true' : 'false' } };
    },
    async transferConnection({ params, body }, ctx) {
      return { status: 200, body: await connections.transfer(ctx, params.id, body) };
    },
    async acceptConnection({ params }, ctx) {
      return { status: 200, body: await connections.accept(ctx, params.id) };
    },
  },
  sealed: [
    { table: 'connections', column: 'credentials_enc', context: credentialsContext },
    { table: 'connections', column: 'oauth_client_enc', context: oauthClientContext },
    { table: 'connections', column: 'authorize_enc', context: authorizeContext },
  ],
});
