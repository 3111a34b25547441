// Connectors (issue 9): the organization's custom connectors with every version of their
// content, every built-in catalog version this database has seen (forks of built-ins read
// their base from it), and generic shares (access-control entries) for connectors now and
// templates, toolboxes and files later.
import { type Kysely, sql } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

const slug = sql`text collate "C"`;

export async function up(db: Kysely<any>): Promise<void> {
  // Custom connectors only; built-in ones live in the catalog files (and catalog_versions).
  // `content` holds the Connector's content members (name, description, icon_url, mcp_url,
  // transport, auth without the client secret, tools, documentation with position and
  // updated_at); the secret is sealed apart, with the context `connector:<org>:<slug>`.
  await db.schema
    .createTable('connectors')
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('slug', slug, (c) => c.notNull().check(sql`slug ~ '^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$'`))
    .addColumn('version', 'integer', (c) => c.notNull().check(sql`version >= 1`))
    .addColumn('content', 'jsonb', (c) => c.notNull())
    .addColumn('client_secret_enc', 'text')
    .addColumn('upstream_slug', slug)
    .addColumn('upstream_version', 'integer')
    .addColumn('linked_at', 'timestamptz')
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('connectors_pkey', ['org_id', 'slug'])
    .addCheckConstraint('connectors_lineage_check', sql`(upstream_slug is null) = (upstream_version is null) and (upstream_slug is null) = (linked_at is null)`)
    .execute();
  await touchUpdatedAt(db, 'connectors');
  // Forks of a connector, to tell them their upstream is gone.
  await db.schema
    .createIndex('connectors_upstream_idx')
    .on('connectors')
    .columns(['org_id', 'upstream_slug'])
    .where(sql.ref('upstream_slug'), 'is not', null)
    .execute();

  // Every version of every custom connector: a fork's base is always known.
  await db.schema
    .createTable('connector_versions')
    .addColumn('org_id', reference, (c) => c.notNull())
    .addColumn('slug', slug, (c) => c.notNull())
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('content', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('connector_versions_pkey', ['org_id', 'slug', 'version'])
    .addForeignKeyConstraint('connector_versions_connector_fkey', ['org_id', 'slug'], 'connectors', ['org_id', 'slug'], (fk) => fk.onDelete('cascade'))
    .execute();

  // Every built-in version this database has seen, written at start-up from the catalog files.
  await db.schema
    .createTable('catalog_versions')
    .addColumn('slug', slug, (c) => c.notNull())
    .addColumn('version', 'integer', (c) => c.notNull().check(sql`version >= 1`))
    .addColumn('content', 'jsonb', (c) => c.notNull())
    .addColumn('loaded_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('catalog_versions_pkey', ['slug', 'version'])
    .execute();

  // Shares of any resource kind with a user, a team or the whole organization.
  await db.schema
    .createTable('shares')
    .addColumn('id', idColumn('acl'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('resource_type', 'text', (c) => c.notNull().check(sql`resource_type in ('connector', 'template', 'toolbox', 'file')`))
    .addColumn('resource_id', reference, (c) => c.notNull())
    .addColumn('principal_type', 'text', (c) => c.notNull().check(sql`principal_type in ('user', 'team', 'organization')`))
    .addColumn('principal_id', reference, (c) => c.notNull())
    .addColumn('level', 'text', (c) => c.notNull().check(sql`level in ('use', 'edit')`))
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('shares_resource_principal_key', ['org_id', 'resource_type', 'resource_id', 'principal_type', 'principal_id'])
    .execute();
  await touchUpdatedAt(db, 'shares');
  // What is shared with a principal (visibility), and a resource's shares by id (its list).
  await db.schema.createIndex('shares_principal_idx').on('shares').columns(['org_id', 'principal_type', 'principal_id']).execute();
  await db.schema.createIndex('shares_resource_idx').on('shares').columns(['org_id', 'resource_type', 'resource_id', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropTouchUpdatedAt(db, 'shares');
  await db.schema.dropTable('shares').execute();
  await db.schema.dropTable('catalog_versions').execute();
  await db.schema.dropTable('connector_versions').execute();
  await dropTouchUpdatedAt(db, 'connectors');
  await db.schema.dropTable('connectors').execute();
}
