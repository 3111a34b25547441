import { defineArea } from '../../http/area';
import { notFound } from '../../http/errors';
import { pageRequest } from '../../http/pagination';
import { runSyntheticTool } from './synthetic-tools.run';
import * as repo from './synthetic-tools.repo';
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
      const tool = await repo.findSyntheticTool(ctx.db, ctx.orgId, params.id);
      if (!tool) throw notFound('synthetic tool', params.id);
      const run = await runSyntheticTool(ctx.deps, ctx.orgId, ctx.user, tool, body.arguments ?? {}, ctx.signal, {
        bindings: body.bindings,
        context: ctx,
        log: ctx.log,
      });
      return { status: 200, body: run };
    },
  },
});
