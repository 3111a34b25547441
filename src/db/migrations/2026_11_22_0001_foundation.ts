// The tables the foundation needs: people and organizations, roles and teams, the
// credentials that act for them, notification destinations, the audit log and the outbox.
// Frozen: later changes go in new migrations.
import { type Kysely, sql } from 'kysely';

const id = (prefix: string) => sql`text collate "C" primary key check (id ~ ${sql.lit(`^${prefix}_[0-7][0-9a-hjkmnp-tv-z]{25}$`)})`;
const ref = sql`text collate "C"`;
const now = sql`now()`;

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('users')
    .addColumn('id', id('usr'))
    .addColumn('email', 'text', (c) => c.notNull())
    .addColumn('name', 'text')
    .addColumn('avatar_url', 'text')
    .addColumn('is_root_org_staff', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('totp_secret_enc', 'text')
    .addColumn('totp_enabled_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .execute();
  await sql`create unique index users_email_key on users (lower(email))`.execute(db);

  await db.schema
    .createTable('organizations')
    .addColumn('id', id('org'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('slug', 'text', (c) => c.notNull().unique())
    .addColumn('logo_url', 'text')
    .addColumn('require_mfa', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('plan', 'text', (c) => c.notNull().defaultTo('free'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .execute();

  await db.schema
    .createTable('memberships')
    .addColumn('org_id', ref, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', ref, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('active', 'suspended', 'removed')`))
    .addColumn('via', 'text', (c) => c.check(sql`via in ('creator', 'invite', 'verified_domain', 'scim', 'sso_jit', 'operator')`))
    .addColumn('joined_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addPrimaryKeyConstraint('memberships_pkey', ['org_id', 'user_id'])
    .execute();
  await db.schema.createIndex('memberships_user_id_idx').on('memberships').columns(['user_id', 'org_id']).execute();

  await db.schema
    .createTable('roles')
    .addColumn('id', id('role'))
    .addColumn('org_id', ref, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('permissions', sql`text[]`, (c) => c.notNull())
    .addColumn('is_system', 'boolean', (c) => c.notNull())
    .addColumn('system_key', 'text')
    .addColumn('seat_class', 'text', (c) => c.notNull().check(sql`seat_class in ('billable', 'free_admin')`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addUniqueConstraint('roles_org_id_name_key', ['org_id', 'name'])
    .addUniqueConstraint('roles_org_id_system_key_key', ['org_id', 'system_key'])
    .execute();

  await db.schema
    .createTable('role_assignments')
    .addColumn('org_id', ref, (c) => c.notNull())
    .addColumn('user_id', ref, (c) => c.notNull())
    .addColumn('role_id', ref, (c) => c.notNull().references('roles.id').onDelete('cascade'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addPrimaryKeyConstraint('role_assignments_pkey', ['org_id', 'user_id', 'role_id'])
    .addForeignKeyConstraint('role_assignments_membership_fkey', ['org_id', 'user_id'], 'memberships', ['org_id', 'user_id'], (c) => c.onDelete('cascade'))
    .execute();

  await db.schema
    .createTable('teams')
    .addColumn('id', id('team'))
    .addColumn('org_id', ref, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addUniqueConstraint('teams_org_id_name_key', ['org_id', 'name'])
    .execute();

  await db.schema
    .createTable('team_members')
    .addColumn('team_id', ref, (c) => c.notNull().references('teams.id').onDelete('cascade'))
    .addColumn('org_id', ref, (c) => c.notNull())
    .addColumn('user_id', ref, (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addPrimaryKeyConstraint('team_members_pkey', ['team_id', 'user_id'])
    .addForeignKeyConstraint('team_members_membership_fkey', ['org_id', 'user_id'], 'memberships', ['org_id', 'user_id'], (c) => c.onDelete('cascade'))
    .execute();
  await db.schema.createIndex('team_members_org_user_idx').on('team_members').columns(['org_id', 'user_id']).execute();

  // An API token acts for one member of one organization; only its hash is kept.
  await db.schema
    .createTable('api_tokens')
    .addColumn('id', id('tok'))
    .addColumn('org_id', ref, (c) => c.notNull())
    .addColumn('user_id', ref, (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('token_hint', 'text', (c) => c.notNull())
    .addColumn('permissions', sql`text[]`, (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz')
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('revoked_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addForeignKeyConstraint('api_tokens_membership_fkey', ['org_id', 'user_id'], 'memberships', ['org_id', 'user_id'], (c) => c.onDelete('cascade'))
    .execute();

  await db.schema
    .createTable('sessions')
    .addColumn('id', id('ses'))
    .addColumn('user_id', ref, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('second_factor_at', 'timestamptz')
    .addColumn('step_up_at', 'timestamptz')
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('revoked_at', 'timestamptz')
    .addColumn('ip', 'text')
    .addColumn('user_agent', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('last_seen_at', 'timestamptz')
    .execute();

  await db.schema
    .createTable('passkeys')
    .addColumn('id', id('pkey'))
    .addColumn('user_id', ref, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('credential_id', 'text', (c) => c.notNull().unique())
    .addColumn('public_key', 'text', (c) => c.notNull())
    .addColumn('counter', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('last_used_at', 'timestamptz')
    .execute();
  await db.schema.createIndex('passkeys_user_id_idx').on('passkeys').column('user_id').execute();

  await db.schema
    .createTable('notification_destinations')
    .addColumn('id', id('onfd'))
    .addColumn('org_id', ref, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull().check(sql`type in ('slack', 'email')`))
    .addColumn('config', 'jsonb', (c) => c.notNull())
    .addColumn('webhook_url_enc', 'text')
    .addColumn('event_types', sql`text[]`, (c) => c.notNull())
    .addColumn('is_active', 'boolean', (c) => c.notNull())
    .addColumn('created_by_user_id', ref, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('last_test_at', 'timestamptz')
    .addColumn('last_test_status', 'text', (c) => c.check(sql`last_test_status in ('ok', 'failed')`))
    .addColumn('last_test_error', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addUniqueConstraint('notification_destinations_org_id_name_key', ['org_id', 'name'])
    .execute();
  // Event delivery looks up the active subscribers of one event in one organization.
  await sql`create index notification_destinations_events_idx on notification_destinations using gin (event_types) where is_active`.execute(db);

  // Append-only: entries of a deleted organization stay, so there is no foreign key on org_id.
  await db.schema
    .createTable('audit_log')
    .addColumn('id', id('aud'))
    .addColumn('org_id', ref)
    .addColumn('actor_type', 'text', (c) => c.notNull())
    .addColumn('actor_id', 'text')
    .addColumn('actor_user_id', 'text')
    .addColumn('action', 'text', (c) => c.notNull())
    .addColumn('target_type', 'text')
    .addColumn('target_id', 'text')
    .addColumn('changes', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('ip', 'text')
    .addColumn('user_agent', 'text')
    .addColumn('request_id', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .execute();
  await db.schema.createIndex('audit_log_org_id_idx').on('audit_log').columns(['org_id', 'id']).execute();

  // Events written in the same transaction as the change that caused them; a worker delivers them.
  await db.schema
    .createTable('outbox')
    .addColumn('id', id('evt'))
    .addColumn('org_id', ref, (c) => c.notNull())
    .addColumn('event_type', 'text', (c) => c.notNull())
    .addColumn('payload', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('available_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('delivered_at', 'timestamptz')
    .addColumn('last_error', 'text')
    .execute();
  await sql`create index outbox_pending_idx on outbox (available_at) where delivered_at is null`.execute(db);

  await db.schema
    .createTable('settings')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('value', 'jsonb', (c) => c.notNull())
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of [
    'settings',
    'outbox',
    'audit_log',
    'notification_destinations',
    'passkeys',
    'sessions',
    'api_tokens',
    'team_members',
    'teams',
    'role_assignments',
    'roles',
    'memberships',
    'organizations',
    'users',
  ]) {
    await db.schema.dropTable(table).ifExists().execute();
  }
}
