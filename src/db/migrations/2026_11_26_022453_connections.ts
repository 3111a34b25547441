// Connections: each member's own authenticated link to a connector's upstream MCP server,
// with its sealed credentials, the OAuth authorization in progress, and the upstream's tool
// list as last fetched. No foreign key to connectors: built-in connectors live in files.
import { sql, type Kysely } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('connections')
    .addColumn('id', idColumn('conn'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('connector_slug', 'text', (c) => c.notNull())
    .addColumn('owner_user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('pending', 'active', 'needs_reauth', 'disconnected')`))
    .addColumn('status_reason', 'text', (c) =>
      c.check(sql`status_reason in ('credentials_rejected', 'refresh_failed', 'owner_left', 'connector_access_lost', 'connector_changed', 'transferred')`),
    )
    .addColumn('status_changed_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('auth_type', 'text', (c) => c.notNull().check(sql`auth_type in ('none', 'api_key', 'oauth2')`))
    // Sealed JSON (context connection:<id>): {api_key} or {access_token, refresh_token, expires_at, token_type}.
    .addColumn('credentials_enc', 'text')
    .addColumn('scopes', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('last_error', 'text')
    // Sealed JSON (context connection-oauth:<id>): the discovered endpoints and, when the
    // server registered itself (RFC 7591), that client: its redirect URI names this connection.
    .addColumn('oauth_client_enc', 'text')
    // The authorization in progress: the state's hash (single use), and, sealed (context
    // connection-authorize:<id>), the PKCE verifier, authorize URL, return_to, scopes, redirect URI.
    .addColumn('authorize_state_hash', 'text')
    .addColumn('authorize_enc', 'text')
    .addColumn('authorize_expires_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('connections_org_id_idx').on('connections').columns(['org_id', 'id']).execute();
  await db.schema.createIndex('connections_owner_idx').on('connections').columns(['org_id', 'owner_user_id', 'id']).execute();
  await db.schema.createIndex('connections_connector_idx').on('connections').columns(['org_id', 'connector_slug']).execute();
  // Using a connection, and why the last use failed, are bookkeeping, not edits.
  await touchUpdatedAt(db, 'connections', ['last_used_at', 'last_error']);

  await db.schema
    .createTable('connection_tools')
    .addColumn('connection_id', sql`text collate "C" primary key`, (c) => c.references('connections.id').onDelete('cascade'))
    .addColumn('tools', 'jsonb', (c) => c.notNull())
    .addColumn('fetched_at', 'timestamptz', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('connection_tools').execute();
  await dropTouchUpdatedAt(db, 'connections');
  await db.schema.dropTable('connections').execute();
}
