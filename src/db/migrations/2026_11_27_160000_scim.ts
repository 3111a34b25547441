// SCIM provisioning: the tokens an organization's identity provider authenticates with on
// /scim/v2/*, and the groups it pushes with their members. SCIM users are memberships
// (memberships.external_id), so they need no table of their own.
import { sql, type Kysely } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  // What the identity provider said of a member it provisions (userName, name, displayName,
  // emails), kept as sent so that GET answers what PUT and PATCH wrote; null for a member SCIM
  // has never described.
  await db.schema.alterTable('memberships').addColumn('scim_profile', 'jsonb').execute();
  await db.schema
    .createTable('scim_tokens')
    .addColumn('id', idColumn('scimtok'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('token_hint', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz')
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('revoked_at', 'timestamptz')
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // Names tell live tokens apart; a revoked token's name may be reused.
  await sql`create unique index scim_tokens_org_id_name_key on scim_tokens (org_id, name) where revoked_at is null`.execute(db);
  await touchUpdatedAt(db, 'scim_tokens', ['last_used_at']);

  await db.schema
    .createTable('scim_groups')
    .addColumn('id', idColumn('grp'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('display_name', 'text', (c) => c.notNull())
    .addColumn('external_id', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // SCIM's displayName is compared case-insensitively (RFC 7643 §4.2: caseExact false).
  await sql`create unique index scim_groups_org_id_display_name_key on scim_groups (org_id, lower(display_name))`.execute(db);
  await sql`create unique index scim_groups_org_id_external_id_key on scim_groups (org_id, external_id) where external_id is not null`.execute(db);
  await touchUpdatedAt(db, 'scim_groups');

  await db.schema
    .createTable('scim_group_members')
    .addColumn('group_id', reference, (c) => c.notNull().references('scim_groups.id').onDelete('cascade'))
    .addColumn('org_id', reference, (c) => c.notNull())
    .addColumn('user_id', reference, (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('scim_group_members_pkey', ['group_id', 'user_id'])
    // A removed membership row stays (status removed); its group places are deleted by the code that removes it.
    .addForeignKeyConstraint('scim_group_members_membership_fkey', ['org_id', 'user_id'], 'memberships', ['org_id', 'user_id'], (c) => c.onDelete('cascade'))
    .execute();
  await db.schema.createIndex('scim_group_members_user_idx').on('scim_group_members').columns(['org_id', 'user_id']).execute();

  // Group mappings: a SCIM group's members hold a role, belong to a team, or both.
  await db.schema
    .createTable('group_mappings')
    .addColumn('id', idColumn('gmap'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('scim_group_id', reference, (c) => c.notNull().references('scim_groups.id').onDelete('cascade'))
    // Deleting a role or team a mapping names is refused (roleUsage, teamUsage), so no cascade.
    .addColumn('role_id', reference, (c) => c.references('roles.id'))
    .addColumn('team_id', reference, (c) => c.references('teams.id'))
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addCheckConstraint('group_mappings_grants_something', sql`role_id is not null or team_id is not null`)
    .execute();
  await sql`create unique index group_mappings_grant_key on group_mappings (scim_group_id, coalesce(role_id, ''), coalesce(team_id, ''))`.execute(db);
  await touchUpdatedAt(db, 'group_mappings');

  // Grants by source: a role or team membership a mapping made is marked via_mapping, so that
  // withdrawing a mapping (or a group membership) takes away only what no other mapping still
  // gives, never what was given directly (via_mapping false: the default of every other insert).
  await db.schema
    .alterTable('role_assignments')
    .addColumn('via_mapping', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
  await db.schema
    .alterTable('team_members')
    .addColumn('via_mapping', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('team_members').dropColumn('via_mapping').execute();
  await db.schema.alterTable('role_assignments').dropColumn('via_mapping').execute();
  await dropTouchUpdatedAt(db, 'group_mappings');
  await db.schema.dropTable('group_mappings').execute();
  await db.schema.dropTable('scim_group_members').execute();
  await dropTouchUpdatedAt(db, 'scim_groups');
  await db.schema.dropTable('scim_groups').execute();
  await dropTouchUpdatedAt(db, 'scim_tokens');
  await db.schema.dropTable('scim_tokens').execute();
  await db.schema.alterTable('memberships').dropColumn('scim_profile').execute();
}
