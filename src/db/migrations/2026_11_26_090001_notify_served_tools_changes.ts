// Servers remember the tools each MCP server serves (src/areas/user-toolboxes/served-tools.ts:
// the user toolbox resolved to connections, their tool caches, the owner's restrictions and
// exceptions, the connectors as the owner sees them). Every change to what that is read from
// notifies `cp_served_tools` when it commits, whichever process made it, with the organization
// changed as payload (empty: any), so that every server forgets that organization's servers.
// Bookkeeping columns (a connection's or a server's last use, a connection's last error)
// notify nothing: they change on calls, and a call must not empty the cache.
import { type Kysely, sql } from 'kysely';
import { dropNotifyServedToolsChanges, notifyServedToolsChanges } from '../migration-helpers';

const EVERY_CHANGE = 'insert or update or delete';

/**
 * Table → the changes that can alter what an MCP server serves, as a trigger's event list, and
 * whether the table has an `org_id` to name (the others clear every organization's servers).
 */
const WATCHED: Record<string, [string, boolean]> = {
  mcp_servers: ['insert or update of org_id, owner_user_id, user_toolbox_id, name, status or delete', true],
  connections: ['insert or update of org_id, connector_slug, owner_user_id, status, auth_type, credentials_enc, scopes, oauth_client_enc or delete', true],
  connection_tools: [EVERY_CHANGE, false],
  connectors: [EVERY_CHANGE, true],
  catalog_versions: [EVERY_CHANGE, false],
  user_toolboxes: [EVERY_CHANGE, true],
  user_toolbox_bindings: [EVERY_CHANGE, false],
  toolboxes: [EVERY_CHANGE, true],
  toolbox_entries: [EVERY_CHANGE, false],
  templates: [EVERY_CHANGE, true],
  synthetic_tools: [EVERY_CHANGE, true],
  shares: [EVERY_CHANGE, true],
  restrictions: [EVERY_CHANGE, true],
  access_requests: [EVERY_CHANGE, true],
  memberships: [EVERY_CHANGE, true],
  roles: [EVERY_CHANGE, true],
  role_assignments: [EVERY_CHANGE, true],
  teams: [EVERY_CHANGE, true],
  team_members: [EVERY_CHANGE, true],
};

export async function up(db: Kysely<any>): Promise<void> {
  // Everything: the payload is empty.
  await sql`
    create function notify_served_tools_changed() returns trigger language plpgsql as $$
    begin
      perform pg_notify('cp_served_tools', '');
      return null;
    end
    $$`.execute(db);
  // The organization of the row changed (before and after, should an update move it); a row of
  // no organization (a built-in role) clears everything.
  await sql`
    create function notify_served_tools_changed_in_org() returns trigger language plpgsql as $$
    begin
      if tg_op <> 'INSERT' then perform pg_notify('cp_served_tools', coalesce(old.org_id, '')); end if;
      if tg_op <> 'DELETE' then perform pg_notify('cp_served_tools', coalesce(new.org_id, '')); end if;
      return null;
    end
    $$`.execute(db);
  for (const [table, [on, byOrganization]] of Object.entries(WATCHED)) await notifyServedToolsChanges(db, table, on, byOrganization);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of Object.keys(WATCHED)) await dropNotifyServedToolsChanges(db, table);
  await sql`drop function notify_served_tools_changed_in_org()`.execute(db);
  await sql`drop function notify_served_tools_changed()`.execute(db);
}
