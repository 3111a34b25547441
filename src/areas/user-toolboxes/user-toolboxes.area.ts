import { defineArea } from '../../http/area';
import { keyedPageRequest } from '../../http/pagination';
import { mcpServerHandlers } from './mcp-servers.handlers';
import { mcpServerHooks } from './mcp-servers.service';
import * as userToolboxes from './user-toolboxes.service';

/**
 * The tag "MCP control plane", REST half: user toolboxes and their MCP servers
 * (mcp-servers.handlers.ts). The MCP endpoint those servers serve, of the same tag, is its own
 * module (src/mcp/endpoint/).
 */
export default defineArea({
  tag: 'MCP control plane',
  hooks: { ...mcpServerHooks, memberRemoved: userToolboxes.onMemberRemoved },
  handlers: {
    ...mcpServerHandlers,
    async listUserToolboxes({ query }, ctx) {
      const page = keyedPageRequest(query, (id) => userToolboxes.USER_TOOLBOX_ID.test(id));
      return { status: 200, body: await userToolboxes.list(ctx, page, { kind: query.kind, template_id: query.template_id }) };
    },
    async createUserToolbox({ body }, ctx) {
      const created = await userToolboxes.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/user-toolbox/${created.id}` } };
    },
    async getUserToolbox({ params }, ctx) {
      return { status: 200, body: await userToolboxes.get(ctx, params.id) };
    },
    async updateUserToolbox({ params, body }, ctx) {
      return { status: 200, body: await userToolboxes.update(ctx, params.id, body) };
    },
    async deleteUserToolbox({ params }, ctx) {
      await userToolboxes.remove(ctx, params.id);
      return { status: 204 };
    },
  },
});
