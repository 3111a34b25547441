import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import { executeSyntheticTool } from './synthetic-tools.run';
import * as synthetic from './synthetic-tools.service';

export default defineArea({
  tag: 'Synthetic tools',
  handlers: {
    async listSyntheticTools({ query }, ctx) {
      const page = pageRequest(query, 'syntheticTool');
      return { status: 200, body: await synthetic.list(ctx, page, { connector_slug: query.connector_slug, created_by_user_id: query.created_by_user_id }) };
    },
    async createSyntheticTool({ body }, ctx) {
      const created = await synthetic.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/synthetic-tool/${created.id}` } };
    },
    async getSyntheticTool({ params }, ctx) {
      return { status: 200, body: await synthetic.get(ctx, params.id) };
    },
    async updateSyntheticTool({ params, body }, ctx) {
      return { status: 200, body: await synthetic.update(ctx, params.id, body) };
    },
    async deleteSyntheticTool({ params }, ctx) {
      await synthetic.remove(ctx, params.id);
      return { status: 204 };
    },
    async executeSyntheticTool({ params, body }, ctx) {
      return { status: 200, body: await executeSyntheticTool(ctx, params.id, body) };
    },
  },
});
