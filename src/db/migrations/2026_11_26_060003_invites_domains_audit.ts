// Issue 12, invites, org domains and the audit log's reads.
//
// Invites: one row per invitation; only the SHA-256 of the emailed link's token is kept. The
// stored status is pending, accepted or revoked; `expired` is read from `expires_at`. At most
// one pending invite per address and organization. The roles and teams it grants are rows of
// their own, so that deleting a role or a team takes it out of pending invites.
//
// Org domains: a DNS name claimed by an organization, proven by a TXT record. Several
// organizations may claim a name; only one may have it verified (a partial unique index).
//
// Audit log: indexes for the list, newest first (created_at, id), and for each filter of
// listAuditEvents (actor, action or action family, target).
import { type Kysely, sql } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('invites')
    .addColumn('id', idColumn('inv'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('email', 'text', (c) => c.notNull().check(sql`email = lower(email)`))
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('pending')
        .check(sql`status in ('pending', 'accepted', 'revoked')`),
    )
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('message', 'text')
    .addColumn('invited_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('accepted_at', 'timestamptz')
    .addColumn('accepted_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('revoked_at', 'timestamptz')
    .addColumn('revoked_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('last_sent_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('send_count', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`create unique index invites_pending_email_key on invites (org_id, email) where status = 'pending'`.execute(db);
  await db.schema.createIndex('invites_org_id_idx').on('invites').columns(['org_id', 'id']).execute();
  await touchUpdatedAt(db, 'invites');

  await db.schema
    .createTable('invite_roles')
    .addColumn('invite_id', reference, (c) => c.notNull().references('invites.id').onDelete('cascade'))
    .addColumn('role_id', reference, (c) => c.notNull().references('roles.id').onDelete('cascade'))
    .addPrimaryKeyConstraint('invite_roles_pkey', ['invite_id', 'role_id'])
    .execute();
  await db.schema.createIndex('invite_roles_role_id_idx').on('invite_roles').column('role_id').execute();

  await db.schema
    .createTable('invite_teams')
    .addColumn('invite_id', reference, (c) => c.notNull().references('invites.id').onDelete('cascade'))
    .addColumn('team_id', reference, (c) => c.notNull().references('teams.id').onDelete('cascade'))
    .addPrimaryKeyConstraint('invite_teams_pkey', ['invite_id', 'team_id'])
    .execute();
  await db.schema.createIndex('invite_teams_team_id_idx').on('invite_teams').column('team_id').execute();

  await db.schema
    .createTable('org_domains')
    .addColumn('id', idColumn('dom'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('domain', 'text', (c) => c.notNull().check(sql`domain = lower(domain)`))
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('pending')
        .check(sql`status in ('pending', 'verified', 'failed')`),
    )
    .addColumn('verification_value', 'text', (c) => c.notNull())
    .addColumn('verified_at', 'timestamptz')
    .addColumn('last_checked_at', 'timestamptz')
    .addColumn('last_check_error', 'text')
    .addColumn('auto_join', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('default_role_id', reference, (c) => c.references('roles.id').onDelete('set null'))
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('org_domains_org_id_domain_key', ['org_id', 'domain'])
    .execute();
  // One verified owner per DNS name across organizations.
  await sql`create unique index org_domains_verified_domain_key on org_domains (domain) where status = 'verified'`.execute(db);
  await db.schema.createIndex('org_domains_org_id_idx').on('org_domains').columns(['org_id', 'id']).execute();
  // A DNS check is bookkeeping, not an edit of the claim.
  await touchUpdatedAt(db, 'org_domains', ['last_checked_at']);

  // listAuditEvents: newest first, and one index per filter so that each stays a range scan.
  await db.schema.createIndex('audit_log_org_created_idx').on('audit_log').columns(['org_id', 'created_at', 'id']).execute();
  await db.schema.createIndex('audit_log_org_actor_user_idx').on('audit_log').columns(['org_id', 'actor_user_id', 'created_at', 'id']).execute();
  await db.schema.createIndex('audit_log_org_actor_idx').on('audit_log').columns(['org_id', 'actor_id', 'created_at', 'id']).execute();
  await db.schema.createIndex('audit_log_org_action_idx').on('audit_log').columns(['org_id', 'action', 'created_at', 'id']).execute();
  // `action=team.*`: the resource part of the action.
  await sql`create index audit_log_org_action_family_idx on audit_log (org_id, split_part(action, '.', 1), created_at, id)`.execute(db);
  await db.schema.createIndex('audit_log_org_target_idx').on('audit_log').columns(['org_id', 'target_type', 'target_id', 'created_at', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const index of [
    'audit_log_org_target_idx',
    'audit_log_org_action_family_idx',
    'audit_log_org_action_idx',
    'audit_log_org_actor_idx',
    'audit_log_org_actor_user_idx',
    'audit_log_org_created_idx',
  ]) {
    await db.schema.dropIndex(index).ifExists().execute();
  }
  await dropTouchUpdatedAt(db, 'org_domains');
  await db.schema.dropTable('org_domains').execute();
  await db.schema.dropTable('invite_teams').execute();
  await db.schema.dropTable('invite_roles').execute();
  await dropTouchUpdatedAt(db, 'invites');
  await db.schema.dropTable('invites').execute();
}
