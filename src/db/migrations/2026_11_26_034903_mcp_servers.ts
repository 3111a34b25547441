// MCP servers (issue 11): an endpoint `{base_url}/mcp/{id}` minted by a member for one of their
// user toolboxes, stored (`utbx_…`, deleted with it by the user-toolboxes delete hook) or
// dynamic (`utbx_dyn_…`, computed, hence no foreign key). Only the token's SHA-256 is kept.
// `status` holds what is stored (`unavailable`: its dynamic user toolbox's toolbox went);
// `expired` is read from `expires_at`. The mcpToken authenticator reads this table, so every
// change to what it reads notifies `cp_credentials` (bookkeeping — last use, name — does not).
import { type Kysely, sql } from 'kysely';
import { dropNotifyCredentialChanges, dropTouchUpdatedAt, idColumn, notifyCredentialChanges, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('mcp_servers')
    .addColumn('id', idColumn('mcp'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_toolbox_id', reference, (c) => c.notNull())
    .addColumn('owner_user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('token_hint', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('active')
        .check(sql`status in ('active', 'unavailable')`),
    )
    .addColumn('expires_at', 'timestamptz')
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('token_rotated_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('mcp_servers_owner_toolbox_name_key', ['org_id', 'owner_user_id', 'user_toolbox_id', 'name'])
    .execute();
  await db.schema.createIndex('mcp_servers_owner_idx').on('mcp_servers').columns(['org_id', 'owner_user_id', 'id']).execute();
  await db.schema.createIndex('mcp_servers_user_toolbox_idx').on('mcp_servers').columns(['org_id', 'user_toolbox_id', 'id']).execute();
  await touchUpdatedAt(db, 'mcp_servers', ['last_used_at']);
  await notifyCredentialChanges(db, 'mcp_servers', 'update of token_hash, status, expires_at, owner_user_id, org_id, user_toolbox_id or delete');
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropNotifyCredentialChanges(db, 'mcp_servers');
  await dropTouchUpdatedAt(db, 'mcp_servers');
  await db.schema.dropTable('mcp_servers').execute();
}
