import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import { countTemplatesUsing } from './templates.repo';
import * as templates from './templates.service';

export default defineArea({
  tag: 'Templates',
  hooks: {
    // Template entries are usages of their connectors: deleteConnector answers 409 connector_in_use while one names it.
    async connectorUsage(db, orgId, slug) {
      const count = await countTemplatesUsing(db, orgId, slug);
      return { count, what: count === 1 ? 'template' : 'templates' };
    },
  },
  handlers: {
    async listTemplates({ query }, ctx) {
      const page = pageRequest(query, 'template');
      return { status: 200, body: await templates.list(ctx, page, { owner_user_id: query.owner_user_id, connector_slug: query.connector_slug }) };
    },
    async createTemplate({ body }, ctx) {
      const created = await templates.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/template/${created.id}` } };
    },
    async getTemplate({ params }, ctx) {
      return { status: 200, body: await templates.get(ctx, params.id) };
    },
    async updateTemplate({ params, body }, ctx) {
      return { status: 200, body: await templates.update(ctx, params.id, body) };
    },
    async deleteTemplate({ params }, ctx) {
      await templates.remove(ctx, params.id);
      return { status: 204 };
    },
    async transferTemplate({ params, body }, ctx) {
      return { status: 200, body: await templates.transfer(ctx, params.id, body) };
    },
    async listTemplateShares({ params, query }, ctx) {
      return { status: 200, body: await templates.listTemplateShares(ctx, params.id, pageRequest(query, 'share')) };
    },
    async shareTemplate({ params, body }, ctx) {
      const { share, created } = await templates.share(ctx, params.id, body);
      return created ? { status: 201, body: share, headers: { Location: `/template/${params.id}/share/${share.id}` } } : { status: 200, body: share };
    },
    async revokeTemplateShare({ params }, ctx) {
      await templates.revokeTemplateShare(ctx, params.id, params.aclId);
      return { status: 204 };
    },
  },
});
