// SSO connections: an organization's SAML or OpenID Connect identity provider, the verified
// domains it serves, the identities signed in through it, and the state SAML needs shared by
// every replica (the requests sent, awaiting their InResponseTo; the assertion ids used, kept
// until they expire so a replay is refused: SAML profiles §4.1.4.5). Sessions record how they
// signed in, so that turning `enforce` on can end the ones that did not come through the
// connection.
import { sql, type Kysely } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('sso_connections')
    .addColumn('id', idColumn('sso'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull().check(sql`type in ('saml', 'oidc')`))
    .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('draft', 'active', 'inactive')`))
    .addColumn('enforce', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('jit_enabled', 'boolean', (c) => c.notNull().defaultTo(false))
    // Deleting a role a connection hands out is refused (roleUsage), never cascaded.
    .addColumn('jit_default_role_id', reference, (c) => c.references('roles.id'))
    .addColumn('saml_idp_entity_id', 'text')
    .addColumn('saml_idp_sso_url', 'text')
    // Every certificate the identity provider may sign with: the current one first, then the
    // next one its metadata already publishes (a rollover keeps both).
    .addColumn('saml_idp_certificates', sql`text[]`)
    .addColumn('saml_idp_metadata_url', 'text')
    .addColumn('saml_metadata_refreshed_at', 'timestamptz')
    .addColumn('oidc_issuer', 'text')
    .addColumn('oidc_client_id', 'text')
    .addColumn('oidc_client_secret_enc', 'text')
    .addColumn('oidc_scopes', sql`text[]`)
    .addColumn('oidc_authorization_endpoint', 'text')
    .addColumn('oidc_token_endpoint', 'text')
    .addColumn('oidc_jwks_uri', 'text')
    // Chosen from the issuer's token_endpoint_auth_methods_supported at discovery.
    .addColumn('oidc_token_auth_method', 'text', (c) => c.check(sql`oidc_token_auth_method in ('client_secret_basic', 'client_secret_post')`))
    .addColumn('last_sign_in_at', 'timestamptz')
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('sso_connections_org_id_name_key', ['org_id', 'name'])
    .execute();
  await touchUpdatedAt(db, 'sso_connections', ['last_sign_in_at', 'saml_metadata_refreshed_at']);

  // One connection per domain: the unique key routes an address to exactly one connection.
  await db.schema
    .createTable('sso_connection_domains')
    .addColumn('connection_id', reference, (c) => c.notNull().references('sso_connections.id').onDelete('cascade'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('domain', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('sso_connection_domains_pkey', ['connection_id', 'domain'])
    .addUniqueConstraint('sso_connection_domains_domain_key', ['domain'])
    .execute();

  // Who signed in through a connection, by the IdP's own names for them: never by email.
  await db.schema
    .createTable('sso_identities')
    .addColumn('connection_id', reference, (c) => c.notNull().references('sso_connections.id').onDelete('cascade'))
    .addColumn('issuer', 'text', (c) => c.notNull())
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('email', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_sign_in_at', 'timestamptz')
    .addPrimaryKeyConstraint('sso_identities_pkey', ['connection_id', 'issuer', 'subject'])
    .execute();
  await sql`create index sso_identities_user_idx on sso_identities (user_id)`.execute(db);

  // SAML AuthnRequests sent and not yet answered (node-saml's cacheProvider, in the database so
  // that any replica can take the answer), and the browser that started each.
  await db.schema
    .createTable('saml_requests')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('connection_id', reference, (c) => c.notNull().references('sso_connections.id').onDelete('cascade'))
    .addColumn('relay_state', 'text', (c) => c.notNull().unique())
    .addColumn('browser_hash', 'text')
    .addColumn('return_to', 'text')
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('saml_used_assertions')
    .addColumn('connection_id', reference, (c) => c.notNull().references('sso_connections.id').onDelete('cascade'))
    .addColumn('assertion_id', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addPrimaryKeyConstraint('saml_used_assertions_pkey', ['connection_id', 'assertion_id'])
    .execute();

  await db.schema
    .alterTable('sessions')
    // How the session signed in (magic_link, passkey, a social provider's key, sso) and through
    // which SSO connection, if any.
    .addColumn('method', 'text')
    .addColumn('sso_connection_id', reference)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('sessions').dropColumn('sso_connection_id').dropColumn('method').execute();
  await db.schema.dropTable('saml_used_assertions').execute();
  await db.schema.dropTable('saml_requests').execute();
  await db.schema.dropTable('sso_identities').execute();
  await db.schema.dropTable('sso_connection_domains').execute();
  await dropTouchUpdatedAt(db, 'sso_connections');
  await db.schema.dropTable('sso_connections').execute();
}
