// Servers remember the tools each MCP server serves (src/areas/user-toolboxes/served-tools.ts:
// the user toolbox resolved to connections, their tool caches, the owner's restrictions and
// exceptions, the connectors as the owner sees them). Every change to what that is read from
// notifies `cp_served_tools` when it commits, whichever process made it, so that every server
// forgets. Bookkeeping columns (a connection's or a server's last use, a connection's last
// error) notify nothing: they change on calls, and a call must not empty the cache.
import { type Kysely, sql } from 'kysely';
import { dropNotifyServedToolsChanges, notifyServedToolsChanges } from '../migration-helpers';

const EVERY_CHANGE = 'insert or update or delete';

/** Table → the changes that can alter what an MCP server serves, as a trigger's event list. */
const WATCHED: Record<string, string> = {
  mcp_servers: 'insert or update of org_id, owner_user_id, user_toolbox_id, name, status or delete',
  connections: 'insert or update of org_id, connector_slug, owner_user_id, status, auth_type, credentials_enc, scopes, oauth_client_enc or delete',
  connection_tools: EVERY_CHANGE,
  connectors: EVERY_CHANGE,
  catalog_versions: EVERY_CHANGE,
  user_toolboxes: EVERY_CHANGE,
  user_toolbox_bindings: EVERY_CHANGE,
  toolboxes: EVERY_CHANGE,
  toolbox_entries: EVERY_CHANGE,
  templates: EVERY_CHANGE,
  synthetic_tools: EVERY_CHANGE,
  shares: EVERY_CHANGE,
  restrictions: EVERY_CHANGE,
  access_requests: EVERY_CHANGE,
  memberships: EVERY_CHANGE,
  roles: EVERY_CHANGE,
  role_assignments: EVERY_CHANGE,
  teams: EVERY_CHANGE,
  team_members: EVERY_CHANGE,
};

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function notify_served_tools_changed() returns trigger language plpgsql as $$
    begin
      perform pg_notify('cp_served_tools', tg_table_name);
      return null;
    end
    $$`.execute(db);
  for (const [table, on] of Object.entries(WATCHED)) await notifyServedToolsChanges(db, table, on);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of Object.keys(WATCHED)) await dropNotifyServedToolsChanges(db, table);
  await sql`drop function notify_served_tools_changed()`.execute(db);
}
