import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import * as mappings from './group-mappings.service';

/** Group mappings: a SCIM group's members hold a role and belong to a team while they are in it. */
export default defineArea({
  tag: 'Group mapping',
  hooks: { roleUsage: mappings.roleUsage, teamUsage: mappings.teamUsage },
  handlers: {
    async listGroupMappings({ query }, ctx) {
      return { status: 200, body: await mappings.list(ctx, pageRequest(query, 'groupMapping'), query) };
    },
    async createGroupMapping({ body }, ctx) {
      const created = await mappings.create(ctx, body as mappings.Create, newId('groupMapping'));
      return { status: 201, body: created, headers: { Location: `/group-mapping/${created.id}` } };
    },
    async getGroupMapping({ params }, ctx) {
      return { status: 200, body: await mappings.get(ctx, params.id) };
    },
    async updateGroupMapping({ params, body }, ctx) {
      return { status: 200, body: await mappings.update(ctx, params.id, body) };
    },
    async deleteGroupMapping({ params }, ctx) {
      await mappings.remove(ctx, params.id);
      return { status: 204 };
    },
  },
});
