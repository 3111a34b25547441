import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as custom from './custom-connectors.service';

// The organization's own connectors: writes, forks and lineage, documentation and shares.
// What they share with the Connectors tag (content, catalog, visibility) is in ../connectors.
export default defineArea({
  tag: 'Custom connectors',
  handlers: {
    async createConnector({ body }, ctx) {
      const created = await custom.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/connector/${created.slug}` } };
    },
    async updateConnector({ params, body }, ctx) {
      return { status: 200, body: await custom.update(ctx, params.slug, body) };
    },
    async deleteConnector({ params }, ctx) {
      await custom.remove(ctx, params.slug);
      return { status: 204 };
    },
    async forkConnector({ params, body }, ctx) {
      const created = await custom.fork(ctx, params.slug, body);
      return { status: 201, body: created, headers: { Location: `/connector/${created.slug}` } };
    },
    async previewConnectorPull({ params }, ctx) {
      return { status: 200, body: await custom.previewPull(ctx, params.slug) };
    },
    async applyConnectorPull({ params, body }, ctx) {
      return { status: 200, body: await custom.applyPull(ctx, params.slug, body) };
    },
    async linkConnectorUpstream({ params, body }, ctx) {
      return { status: 200, body: await custom.linkUpstream(ctx, params.slug, body) };
    },
    async upsertConnectorDocumentation({ params, body }, ctx) {
      return { status: 200, body: await custom.upsertDocumentation(ctx, params.slug, body) };
    },
    async listConnectorShares({ params, query }, ctx) {
      return { status: 200, body: await custom.listConnectorShares(ctx, params.slug, pageRequest(query, 'share')) };
    },
    async shareConnector({ params, body }, ctx) {
      const { share, created } = await custom.share(ctx, params.slug, body);
      return created ? { status: 201, body: share, headers: { Location: `/connector/${params.slug}/share/${share.id}` } } : { status: 200, body: share };
    },
    async revokeConnectorShare({ params }, ctx) {
      await custom.revokeConnectorShare(ctx, params.slug, params.aclId);
      return { status: 204 };
    },
  },
});
