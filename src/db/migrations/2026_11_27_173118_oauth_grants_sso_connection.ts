// An MCP OAuth grant remembers the SSO connection its consent was signed in through (null: another
// way in). When a connection starts being enforced, grants consented outside it end with the
// sessions outside it: a refresh token would otherwise keep an AI client in for 90 days past the
// organization's decision that its people come in through its identity provider.
import { type Kysely } from 'kysely';
import { reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('oauth_grants')
    .addColumn('sso_connection_id', reference, (c) => c.references('sso_connections.id').onDelete('set null'))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('oauth_grants').dropColumn('sso_connection_id').execute();
}
