import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as connections from './sso-connections.service';

export default defineArea({
  tag: 'SSO connections',
  hooks: { roleUsage: connections.roleUsage },
  sealed: [{ table: 'sso_connections', column: 'oidc_client_secret_enc', context: connections.clientSecretContext }],
  handlers: {
    async listSsoConnections({ query }, ctx) {
      const page = pageRequest(query, 'ssoConnection');
      return { status: 200, body: await connections.list(ctx, page, { type: query.type, status: query.status, domain: query.domain }) };
    },
    async createSsoConnection({ body }, ctx) {
      const created = await connections.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/sso-connection/${created.id}` } };
    },
    async getSsoConnection({ params }, ctx) {
      return { status: 200, body: await connections.get(ctx, params.id) };
    },
    async updateSsoConnection({ params, body }, ctx) {
      return { status: 200, body: await connections.update(ctx, params.id, body) };
    },
    async deleteSsoConnection({ params }, ctx) {
      await connections.remove(ctx, params.id);
      return { status: 204 };
    },
  },
});
