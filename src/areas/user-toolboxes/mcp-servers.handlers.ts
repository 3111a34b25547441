import type { AreaHandlers } from '../../http/handler-types';
import type { RequestContext } from '../../http/context';
import { pageRequest } from '../../http/pagination';
import * as servers from './mcp-servers.service';

/** The MCP server operations of the tag "MCP control plane", spread into its area's handlers. */
export const mcpServerHandlers: Pick<
  AreaHandlers<'MCP control plane', RequestContext>,
  'listMcpServers' | 'listUserToolboxMcpServers' | 'createMcpServer' | 'getMcpServer' | 'updateMcpServer' | 'deleteMcpServer' | 'rotateMcpServerToken'
> = {
  async listMcpServers({ query }, ctx) {
    return { status: 200, body: await servers.listAll(ctx, pageRequest(query, 'mcpServer'), query.status) };
  },
  async listUserToolboxMcpServers({ params, query }, ctx) {
    return { status: 200, body: await servers.listOf(ctx, params.id, pageRequest(query, 'mcpServer')) };
  },
  async createMcpServer({ params, body }, ctx) {
    const minted = await servers.create(ctx, params.id, body);
    return { status: 201, body: minted, headers: { Location: `/user-toolbox/${params.id}/mcp/${minted.mcp_server.id}` } };
  },
  async getMcpServer({ params }, ctx) {
    return { status: 200, body: await servers.get(ctx, params.id, params.mcpId) };
  },
  async updateMcpServer({ params, body }, ctx) {
    return { status: 200, body: await servers.update(ctx, params.id, params.mcpId, body) };
  },
  async deleteMcpServer({ params }, ctx) {
    await servers.remove(ctx, params.id, params.mcpId);
    return { status: 204 };
  },
  async rotateMcpServerToken({ params }, ctx) {
    return { status: 200, body: await servers.rotate(ctx, params.id, params.mcpId) };
  },
};
