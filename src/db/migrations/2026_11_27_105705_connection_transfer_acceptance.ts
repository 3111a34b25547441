// A connection handed over with its credentials keeps acting as whoever authorized it, so it
// serves nothing for its new owner until they accept it (`awaiting_acceptance`), and once
// accepted it never shadows a connection they made themselves: `transferred_at` (when the
// current owner received it; null when they made it) orders received connections after their
// own. `transferred_from_user_id` says from whom. Both acceptance and the order change what an
// MCP server serves, so the connections trigger of cp_served_tools now names them too.
import { type Kysely, sql } from 'kysely';
import { dropNotifyServedToolsChanges, notifyServedToolsChanges, reference } from '../migration-helpers';

const WATCHED = 'org_id, connector_slug, owner_user_id, status, auth_type, credentials_enc, scopes, oauth_client_enc';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('connections')
    .addColumn('transferred_from_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('transferred_at', 'timestamptz')
    .addColumn('awaiting_acceptance', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
  await db.schema
    .alterTable('connections')
    .addCheckConstraint('connections_awaiting_acceptance_check', sql`not awaiting_acceptance or transferred_at is not null`)
    .execute();
  await dropNotifyServedToolsChanges(db, 'connections');
  await notifyServedToolsChanges(db, 'connections', `insert or update of ${WATCHED}, transferred_at, awaiting_acceptance or delete`, true);
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropNotifyServedToolsChanges(db, 'connections');
  await notifyServedToolsChanges(db, 'connections', `insert or update of ${WATCHED} or delete`, true);
  await db.schema.alterTable('connections').dropConstraint('connections_awaiting_acceptance_check').execute();
  await db.schema.alterTable('connections').dropColumn('transferred_from_user_id').dropColumn('transferred_at').dropColumn('awaiting_acceptance').execute();
}
