// MCP OAuth access tokens may be remembered by the credential cache like the MCP servers' own
// tokens: every table their authenticator reads tells every server to forget on change. The
// MCP servers, memberships, roles and organizations already do; these are the grant and the
// token themselves (a revocation, a withdrawn grant, a narrowed scope).
import type { Kysely } from 'kysely';
import { dropNotifyCredentialChanges, notifyCredentialChanges } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await notifyCredentialChanges(db, 'oauth_access_tokens', 'update of revoked_at, expires_at, grant_id, scope or delete');
  await notifyCredentialChanges(db, 'oauth_grants', 'update of revoked_at, expires_at, scope, user_id, mcp_server_id, client_id or delete');
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropNotifyCredentialChanges(db, 'oauth_grants');
  await dropNotifyCredentialChanges(db, 'oauth_access_tokens');
}
