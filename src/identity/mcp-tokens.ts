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
 * acts as whoever minted the token (or last rotated it) in the server's organization: the
 * owner with their current permissions when a session did; when an API token did, within that
 * token's permissions and only while it is valid (a credential never mints one that outlives
 * or outranks it). Refused: an unknown token (also the one a rotation replaced), an expired
 * server, a revoked or expired minting API token, an owner who is no longer an active member. An `unavailable`
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
      .leftJoin('api_tokens as t', 't.id', 's.minted_by_token_id')
      .select(['s.id', 's.org_id', 's.owner_user_id', 's.expires_at', 's.last_used_at', 's.minted_by_token_id', 'm.status', 'o.require_mfa', ...rolesHeld('m')])
      .select(['t.permissions as token_permissions', 't.expires_at as token_expires_at', 't.revoked_at as token_revoked_at'])
      .where('s.token_hash', '=', hashSecret(credential.secret))
      .executeTakeFirst();
    if (!server) return { status: 'invalid', detail: 'The MCP server token is unknown, was rotated, or its server was deleted.' };
    if (server.expires_at && server.expires_at <= now) {
      return { status: 'invalid', detail: 'The MCP server has expired; its owner can move expires_at (PATCH /user-toolbox/{id}/mcp/{mcpId}).' };
    }
    const mintedByToken = server.minted_by_token_id !== null;
    if (mintedByToken && (server.token_revoked_at || !server.token_permissions || (server.token_expires_at && server.token_expires_at <= now))) {
      return {
        status: 'invalid',
        detail:
          'The API token that minted this MCP server token was revoked or has expired; its owner can rotate the MCP server token (POST /user-toolbox/{id}/mcp/{mcpId}/rotate).',
      };
    }
    // Remembered no longer than the earlier of the two expiries.
    const tokenExpiry = mintedByToken ? server.token_expires_at : null;
    const expiresAt = !tokenExpiry || (server.expires_at && server.expires_at <= tokenExpiry) ? server.expires_at : tokenExpiry;
    if (server.status !== 'active' || server.require_mfa === null) {
      return {
        status: 'invalid',
        detail: inactiveMember(
          server.status === 'suspended' || server.status === 'removed' ? server.status : 'none',
          server.org_id,
          'This MCP server’s owner’s',
        ),
      };
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
        expiresAt,
        access: {
          orgId: server.org_id,
          requireMfa: server.require_mfa,
          permissions: effectivePermissions(server, mintedByToken ? server.token_permissions : null),
        },
      },
    };
  },
};
