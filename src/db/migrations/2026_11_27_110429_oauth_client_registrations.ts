// The clients this server registered at OAuth authorization servers (RFC 7591) for connections,
// one per authorization server (issuer) and redirect URI: a connection authorized again at
// the same server for the same redirect URI reuses its registration rather than register
// anew, and the registrations an organization made lately are what its limit on new ones
// counts. The client is sealed (it may hold a secret). Kept after its connection is deleted,
// for the count; gone with the organization.
import { sql, type Kysely } from 'kysely';
import { reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('oauth_client_registrations')
    .addColumn('issuer', 'text', (c) => c.notNull())
    .addColumn('redirect_uri', 'text', (c) => c.notNull())
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('client_enc', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('oauth_client_registrations_pkey', ['issuer', 'redirect_uri'])
    .execute();
  await db.schema.createIndex('oauth_client_registrations_org_created_idx').on('oauth_client_registrations').columns(['org_id', 'created_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('oauth_client_registrations').execute();
}
