import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as restrictions from './restrictions.service';

export default defineArea({
  tag: 'Restrictions',
  handlers: {
    async listRestrictions({ query }, ctx) {
      const page = pageRequest(query, 'restriction');
      return {
        status: 200,
        body: await restrictions.list(ctx, page, {
          effect: query.effect,
          connector_slug: query.connector_slug,
          synthetic_tool_id: query.synthetic_tool_id,
          is_active: query.is_active,
        }),
      };
    },
    async createRestriction({ body }, ctx) {
      const created = await restrictions.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/restriction/${created.id}` } };
    },
    async getRestriction({ params }, ctx) {
      return { status: 200, body: await restrictions.get(ctx, params.id) };
    },
    async updateRestriction({ params, body }, ctx) {
      return { status: 200, body: await restrictions.update(ctx, params.id, body) };
    },
    async deleteRestriction({ params }, ctx) {
      await restrictions.remove(ctx, params.id);
      return { status: 204 };
    },
  },
});
