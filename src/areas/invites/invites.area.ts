import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as invites from './invites.service';

export default defineArea({
  tag: 'Invites',
  hooks: { roleUsage: invites.roleUsage },
  handlers: {
    async listInvites({ query }, ctx) {
      const page = pageRequest(query, 'invite');
      return { status: 200, body: await invites.list(ctx, page, { status: query.status, email: query.email }) };
    },
    async createInvite({ body }, ctx) {
      const created = await invites.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/invite/${created.id}` } };
    },
    async getInvite({ params }, ctx) {
      return { status: 200, body: await invites.get(ctx, params.id) };
    },
    async revokeInvite({ params }, ctx) {
      return { status: 200, body: await invites.revoke(ctx, params.id) };
    },
    async resendInvite({ params }, ctx) {
      return { status: 200, body: await invites.resend(ctx, params.id) };
    },
  },
});
