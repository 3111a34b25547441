import { hashSecret, randomSecret } from '../lib/crypto';
import { effectivePermissions, inactiveMember, rolesHeld, touchLastUsed, type Authenticator } from './credentials';

/** An MCP server's own bearer token: `mcpt_` and 32 random bytes in base64url. */
export const MCP_TOKEN_PREFIX = 'mcpt';

export interface NewMcpToken {
  /** Shown once, in the response that minted or rotated it; never stored. */
  token: string;
  hash: string;
  hint: string;
}

/** A fresh MCP server token: only its SHA-256 and last four characters are kept. */
export function newMcpToken(): NewMcpToken {
  const token = randomSecret(MCP_TOKEN_PREFIX);
  return { token, hash: hashSecret(token), hint: token.slice(-4) };
}

/**
 * The `mcpToken` security scheme for an MCP server's own token (`mcpt_…`): the MCP client
 * acts as the server's owner in the server's organization, with the owner's current
 * permissions (no ceiling of its own). Refused: an unknown token (also the one a rotation
 * replaced), an expired server, an owner who is no longer an active member. An `unavailable`
 * server (its dynamic user toolbox is gone) still authenticates: the endpoint answers it with
 * an empty `tools/list` (McpServerStatus). Remembered by the credential cache: `mcp_servers`
 * notifies on token, status, expiry and delete; memberships, roles and organizations already do.
 */
export const mcpServerTokenAuthenticator: Authenticator = {
  describes: 'an MCP server token',
  howToSend: 'send the MCP server\'s token as "Authorization: Bearer mcpt_…"',
  cache: {
    recordUse(caller, db, now) {
      if (caller.kind === 'mcp_client' && caller.via === 'server_token') touchLastUsed(db, 'mcp_servers', 'last_used_at', caller.mcpServerId, null, now);
    },
  },
  recognizes: (credential) => credential.scheme === 'bearer' && credential.secret.startsWith(`${MCP_TOKEN_PREFIX}_`),
  async authenticate(credential, db, now = new Date()) {
    const server = await db
      .selectFrom('mcp_servers as s')
      .leftJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 's.org_id').onRef('m.user_id', '=', 's.owner_user_id'))
      .leftJoin('organizations as o', 'o.id', 's.org_id')
      .select(['s.id', 's.org_id', 's.owner_user_id', 's.expires_at', 's.last_used_at', 'm.status', 'o.require_mfa', ...rolesHeld('m')])
      .where('s.token_hash', '=', hashSecret(credential.secret))
      .executeTakeFirst();
    if (!server) return { status: 'invalid', detail: 'The MCP server token is unknown, was rotated, or its server was deleted.' };
    if (server.expires_at && server.expires_at <= now) {
      return { status: 'invalid', detail: 'The MCP server has expired; its owner can move expires_at (PATCH /user-toolbox/{id}/mcp/{mcpId}).' };
    }
    if (server.status !== 'active' || server.require_mfa === null) {
      return { status: 'invalid', detail: inactiveMember(server.status === 'suspended' || server.status === 'removed' ? server.status : 'none', server.org_id, 'This MCP server’s owner’s') };
    }
    touchLastUsed(db, 'mcp_servers', 'last_used_at', server.id, server.last_used_at, now);
    return {
      status: 'ok',
      caller: {
        kind: 'mcp_client',
        userId: server.owner_user_id,
        via: 'server_token',
        mcpServerId: server.id,
        clientId: null,
        orgId: server.org_id,
        expiresAt: server.expires_at,
        access: { orgId: server.org_id, requireMfa: server.require_mfa, permissions: effectivePermissions(server, null) },
      },
    };
  },
};
