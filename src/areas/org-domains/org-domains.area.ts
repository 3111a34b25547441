import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as domains from './org-domains.service';

export default defineArea({
  tag: 'Org domains',
  hooks: { roleUsage: domains.roleUsage },
  handlers: {
    async listOrgDomains({ query }, ctx) {
      const page = pageRequest(query, 'orgDomain');
      return { status: 200, body: await domains.list(ctx, page, { status: query.status }) };
    },
    async createOrgDomain({ body }, ctx) {
      const created = await domains.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/org-domain/${created.id}` } };
    },
    async getOrgDomain({ params }, ctx) {
      return { status: 200, body: await domains.get(ctx, params.id) };
    },
    async updateOrgDomain({ params, body }, ctx) {
      return { status: 200, body: await domains.update(ctx, params.id, body) };
    },
    async deleteOrgDomain({ params }, ctx) {
      await domains.remove(ctx, params.id);
      return { status: 204 };
    },
    async verifyOrgDomain({ params }, ctx) {
      return { status: 200, body: await domains.verify(ctx, params.id) };
    },
  },
});
