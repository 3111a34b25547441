/**
 * Shared set-up of the MCP tests, through the API as a member would do it: a connection of a
 * member to a connector, and an MCP server minted over a user toolbox (its token is shown
 * once). Each throws with the answer when the API refuses, so a broken set-up names itself.
 */
import { randomBytes } from 'node:crypto';
import type { components } from '../../generated/openapi';
import type { TestApp } from './app';
import type { Who } from './client';

type Schemas = components['schemas'];

/** The member's own user toolbox over all their connections. */
export const ALL_CONNECTIONS_TOOLBOX = 'utbx_dyn_all';

export interface MintedServer {
  id: string;
  /** The MCP server token, shown once. */
  token: string;
  server: Schemas['McpServer'];
}

/** An MCP server minted by `who` (createMcpServer) over a user toolbox, all their connections unless told. */
export async function mintMcpServer(
  t: TestApp,
  who: Who,
  options: { userToolboxId?: string; name?: string; body?: Omit<Schemas['McpServerCreate'], 'name'> } = {},
): Promise<MintedServer> {
  const res = await t.as(who).op('createMcpServer', {
    params: { id: options.userToolboxId ?? ALL_CONNECTIONS_TOOLBOX },
    body: { ...options.body, name: options.name ?? `server ${randomBytes(3).toString('hex')}` },
  });
  if (res.status !== 201) throw new Error(`createMcpServer: ${res.status} ${res.text}`);
  return { id: res.body.mcp_server.id, token: res.body.token, server: res.body.mcp_server };
}

/** A connection of `who` to a connector (createConnection), with an API key when the connector takes one; its id. */
export async function connectMember(t: TestApp, who: Who, connectorSlug: string, apiKey?: string, name?: string): Promise<string> {
  const res = await t.as(who).op('createConnection', {
    body: {
      connector_slug: connectorSlug,
      ...(apiKey !== undefined ? { api_key: apiKey } : {}),
      ...(name !== undefined ? { name } : {}),
    } as Schemas['ConnectionCreate'],
  });
  if (res.status !== 201) throw new Error(`createConnection: ${res.status} ${res.text}`);
  return res.body.id;
}

/** A member of the organization (system roles by key, or role ids) and an API token of theirs, as a caller. */
export async function memberWithToken(
  t: TestApp,
  orgId: string,
  roles: string[] = ['member'],
  permissions?: readonly string[],
): Promise<{ userId: string; token: string; org: string }> {
  const userId = await t.factories.member(orgId, { roles });
  const token = await t.factories.token(orgId, userId, permissions);
  return { userId, token, org: orgId };
}
