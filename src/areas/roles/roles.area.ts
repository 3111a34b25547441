import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import * as roles from './roles.service';

export default defineArea({
  tag: 'Roles',
  handlers: {
    async listRoles({ query }, ctx) {
      return { status: 200, body: await roles.list(ctx, pageRequest(query, 'role'), { is_system: query.is_system }) };
    },
    async createRole({ body }, ctx) {
      const created = await roles.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/role/${created.id}` } };
    },
    async getRole({ params }, ctx) {
      return { status: 200, body: await roles.get(ctx, params.id) };
    },
    async updateRole({ params, body }, ctx) {
      return { status: 200, body: await roles.update(ctx, params.id, body) };
    },
    async deleteRole({ params }, ctx) {
      await roles.remove(ctx, params.id);
      return { status: 204 };
    },
  },
});
