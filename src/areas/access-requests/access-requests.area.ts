import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as requests from './access-requests.service';

export default defineArea({
  tag: 'Access requests',
  handlers: {
    async listAccessRequests({ query }, ctx) {
      const page = pageRequest(query, 'accessRequest');
      return {
        status: 200,
        body: await requests.list(ctx, page, { status: query.status, requester_user_id: query.requester_user_id, restriction_id: query.restriction_id }),
      };
    },
    async createAccessRequest({ body }, ctx) {
      const created = await requests.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/access-request/${created.id}` } };
    },
    async getAccessRequest({ params }, ctx) {
      return { status: 200, body: await requests.get(ctx, params.id) };
    },
    async resolveAccessRequest({ params, body }, ctx) {
      return { status: 200, body: await requests.resolve(ctx, params.id, body) };
    },
    async withdrawAccessRequest({ params }, ctx) {
      return { status: 200, body: await requests.withdraw(ctx, params.id) };
    },
  },
});
