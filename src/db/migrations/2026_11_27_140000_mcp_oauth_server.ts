// The OAuth authorization server MCP clients use: the clients (registered, or known by their
// Client ID Metadata Document's URL), the authorization requests waiting on the consent page,
// each person's grants, and the codes and tokens issued under a grant. Codes and refresh tokens
// are kept as SHA-256 hashes; an access token is a signed JWT whose id (jti) is kept, so that
// every use can be checked against revocation. Everything issued under a grant goes with it
// (on delete cascade): withdrawing consent, or deleting the MCP server, ends them all.
import { type Kysely, sql } from 'kysely';
import { idColumn, reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('oauth_clients')
    // `oac_…`, or the https URL of a Client ID Metadata Document.
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('kind', 'text', (c) => c.notNull().check(sql`kind in ('registered', 'metadata_document')`))
    .addColumn('secret_hash', 'text')
    // The client information as stored: redirect URIs, grants, auth method, name and the rest.
    .addColumn('metadata', 'jsonb', (c) => c.notNull())
    // A metadata document's: fetched again after this.
    .addColumn('fresh_until', 'timestamptz')
    // Where a registration came from: registrations are limited per address.
    .addColumn('registered_ip', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_authorized_at', 'timestamptz')
    .execute();
  await db.schema
    .createIndex('oauth_clients_unused_idx')
    .on('oauth_clients')
    .columns(['created_at'])
    .where(sql.ref('last_authorized_at'), 'is', null)
    .execute();
  await db.schema.createIndex('oauth_clients_registered_ip_idx').on('oauth_clients').columns(['registered_ip', 'created_at']).execute();

  await db.schema
    .createTable('oauth_authorization_requests')
    .addColumn('id', idColumn('oar'))
    .addColumn('user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('client_id', 'text', (c) => c.notNull().references('oauth_clients.id').onDelete('cascade'))
    .addColumn('mcp_server_id', reference, (c) => c.notNull().references('mcp_servers.id').onDelete('cascade'))
    .addColumn('redirect_uri', 'text', (c) => c.notNull())
    // Whether the request named the redirect URI (then the token request must name it too).
    .addColumn('redirect_uri_named', 'boolean', (c) => c.notNull())
    .addColumn('state', 'text')
    .addColumn('code_challenge', 'text', (c) => c.notNull())
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('nonce', 'text')
    .addColumn('auth_time', 'timestamptz', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('oauth_authorization_requests_expiry_idx').on('oauth_authorization_requests').column('expires_at').execute();

  await db.schema
    .createTable('oauth_grants')
    .addColumn('id', idColumn('ogr'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('mcp_server_id', reference, (c) => c.notNull().references('mcp_servers.id').onDelete('cascade'))
    .addColumn('client_id', 'text', (c) => c.notNull().references('oauth_clients.id').onDelete('cascade'))
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('revoked_at', 'timestamptz')
    .execute();
  // One live grant per person, client and server: consenting again replaces it.
  await db.schema
    .createIndex('oauth_grants_live_key')
    .unique()
    .on('oauth_grants')
    .columns(['user_id', 'mcp_server_id', 'client_id'])
    .where(sql.ref('revoked_at'), 'is', null)
    .execute();
  await db.schema.createIndex('oauth_grants_org_idx').on('oauth_grants').columns(['org_id', 'id']).execute();

  await db.schema
    .createTable('oauth_codes')
    .addColumn('code_hash', 'text', (c) => c.primaryKey())
    .addColumn('grant_id', reference, (c) => c.notNull().references('oauth_grants.id').onDelete('cascade'))
    .addColumn('redirect_uri', 'text', (c) => c.notNull())
    .addColumn('redirect_uri_named', 'boolean', (c) => c.notNull())
    .addColumn('code_challenge', 'text', (c) => c.notNull())
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('nonce', 'text')
    .addColumn('auth_time', 'timestamptz', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .execute();

  await db.schema
    .createTable('oauth_refresh_tokens')
    .addColumn('token_hash', 'text', (c) => c.primaryKey())
    .addColumn('grant_id', reference, (c) => c.notNull().references('oauth_grants.id').onDelete('cascade'))
    // The code its chain started from: a replayed code revokes the chain.
    .addColumn('code_hash', 'text')
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('rotated_at', 'timestamptz')
    // The refresh token that replaced this one, sealed, kept only through the grace window in
    // which a racing session presenting this one is handed the same successor.
    .addColumn('successor_enc', 'text')
    .execute();
  await db.schema.createIndex('oauth_refresh_tokens_grant_idx').on('oauth_refresh_tokens').column('grant_id').execute();

  await db.schema
    .createTable('oauth_access_tokens')
    .addColumn('jti', 'text', (c) => c.primaryKey())
    .addColumn('grant_id', reference, (c) => c.notNull().references('oauth_grants.id').onDelete('cascade'))
    // The code it was issued for, if any: a replayed code revokes what it issued.
    .addColumn('code_hash', 'text')
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('revoked_at', 'timestamptz')
    .execute();
  await db.schema.createIndex('oauth_access_tokens_grant_idx').on('oauth_access_tokens').column('grant_id').execute();
  await db.schema.createIndex('oauth_access_tokens_expiry_idx').on('oauth_access_tokens').column('expires_at').execute();

  await db.schema
    .createTable('oauth_signing_keys')
    .addColumn('kid', 'text', (c) => c.primaryKey())
    // The private JWK, sealed (context oauth-signing-key:<kid>).
    .addColumn('private_jwk_enc', 'text', (c) => c.notNull())
    .addColumn('public_jwk', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    // No longer signs; still published until the tokens it signed have expired.
    .addColumn('retired_at', 'timestamptz')
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of [
    'oauth_signing_keys',
    'oauth_access_tokens',
    'oauth_refresh_tokens',
    'oauth_codes',
    'oauth_grants',
    'oauth_authorization_requests',
    'oauth_clients',
  ]) {
    await db.schema.dropTable(table).execute();
  }
}
