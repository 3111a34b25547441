import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as toolboxes from './toolboxes.service';

// The organization's curated toolboxes and their shares. What other areas use of them
// (toolboxesSharedWith, toolboxEntries, hooks) is in ./index.ts.
export default defineArea({
  tag: 'Toolboxes',
  handlers: {
    async listToolboxes({ query }, ctx) {
      const page = pageRequest(query, 'toolbox');
      const filter = { connection_id: query.connection_id, synthetic_tool_id: query.synthetic_tool_id, created_by_user_id: query.created_by_user_id };
      return { status: 200, body: await toolboxes.list(ctx, page, filter) };
    },
    async createToolbox({ body }, ctx) {
      const created = await toolboxes.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/toolbox/${created.id}` } };
    },
    async getToolbox({ params }, ctx) {
      return { status: 200, body: await toolboxes.get(ctx, params.id) };
    },
    async updateToolbox({ params, body }, ctx) {
      return { status: 200, body: await toolboxes.update(ctx, params.id, body) };
    },
    async deleteToolbox({ params }, ctx) {
      await toolboxes.remove(ctx, params.id);
      return { status: 204 };
    },
    async listToolboxShares({ params, query }, ctx) {
      return { status: 200, body: await toolboxes.listToolboxShares(ctx, params.id, pageRequest(query, 'share')) };
    },
    async shareToolbox({ params, body }, ctx) {
      const { share, created } = await toolboxes.share(ctx, params.id, body);
      return created ? { status: 201, body: share, headers: { Location: `/toolbox/${params.id}/share/${share.id}` } } : { status: 200, body: share };
    },
    async revokeToolboxShare({ params }, ctx) {
      await toolboxes.revokeToolboxShare(ctx, params.id, params.aclId);
      return { status: 204 };
    },
  },
});
