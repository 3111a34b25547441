import { defineArea } from '../../http/area';
import * as members from './members.service';

export default defineArea({
  tag: 'Members',
  handlers: {
    async listMembers({ query }, ctx) {
      return { status: 200, body: await members.list(ctx, query) };
    },
    async getMember({ params }, ctx) {
      return { status: 200, body: await members.get(ctx, params.userId) };
    },
    async updateMember({ params, body }, ctx) {
      return { status: 200, body: await members.update(ctx, params.userId, body) };
    },
    async removeMember({ params }, ctx) {
      await members.remove(ctx, params.userId);
      return { status: 204 };
    },
  },
});
