import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as tokens from './scim-tokens.service';

/** The SCIM tokens people manage for their identity provider; the SCIM protocol itself is src/protocols/scim. */
export default defineArea({
  tag: 'SCIM v2',
  handlers: {
    async listScimTokens({ query }, ctx) {
      return { status: 200, body: await tokens.list(ctx, pageRequest(query, 'scimToken')) };
    },
    async createScimToken({ body }, ctx) {
      const created = await tokens.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/scim-token/${created.scim_token.id}` } };
    },
    async deleteScimToken({ params }, ctx) {
      await tokens.revoke(ctx, params.id);
      return { status: 204 };
    },
  },
});
