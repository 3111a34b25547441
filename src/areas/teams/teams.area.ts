import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as teams from './teams.service';

export default defineArea({
  tag: 'Teams',
  hooks: { memberRemoved: teams.onMemberRemoved },
  handlers: {
    async listTeams({ query }, ctx) {
      return { status: 200, body: await teams.list(ctx, pageRequest(query, 'team'), { user_id: query.user_id }) };
    },
    async createTeam({ body }, ctx) {
      const created = await teams.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/team/${created.id}` } };
    },
    async getTeam({ params }, ctx) {
      return { status: 200, body: await teams.get(ctx, params.id) };
    },
    async updateTeam({ params, body }, ctx) {
      return { status: 200, body: await teams.update(ctx, params.id, body) };
    },
    async deleteTeam({ params }, ctx) {
      await teams.remove(ctx, params.id);
      return { status: 204 };
    },
    async listTeamMembers({ params, query }, ctx) {
      return { status: 200, body: await teams.listMembers(ctx, params.id, query) };
    },
    async addTeamMember({ params, body }, ctx) {
      const { created, member } = await teams.addMember(ctx, params.id, body.user_id);
      if (!created) return { status: 200, body: member };
      return { status: 201, body: member, headers: { Location: `/team/${params.id}/members/${body.user_id}` } };
    },
    async removeTeamMember({ params }, ctx) {
      await teams.removeMember(ctx, params.id, params.userId);
      return { status: 204 };
    },
  },
});
