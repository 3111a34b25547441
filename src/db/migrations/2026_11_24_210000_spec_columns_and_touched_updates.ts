// What the spec's resources show and the tables did not keep (who created a team or a role,
// who added a team member and when, when a token or a passkey last changed, why a member is
// suspended, a passkey's transports), `updated_at` kept by one trigger instead of by every
// repository, and CHECKs on the columns that take a fixed set of values. System roles'
// permissions are read from the catalog by system_key, so their stored lists are emptied.
import { type Kysely, sql } from 'kysely';
import { dropTouchUpdatedAt, reference, touchUpdatedAt } from '../migration-helpers';

/** Tables with `updated_at`, and the columns whose change is bookkeeping rather than an edit. */
const TOUCHED: Record<string, string[]> = {
  users: [],
  organizations: [],
  memberships: [],
  roles: [],
  teams: [],
  api_tokens: ['last_used_at'],
  passkeys: ['last_used_at', 'counter'],
  notification_destinations: ['last_test_at', 'last_test_status', 'last_test_error'],
  settings: [],
};

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function touch_updated_at() returns trigger language plpgsql as $$
    begin
      if new.updated_at is distinct from old.updated_at then
        return new;
      end if;
      if (to_jsonb(new) - 'updated_at' - tg_argv) is distinct from (to_jsonb(old) - 'updated_at' - tg_argv) then
        new.updated_at := now();
      end if;
      return new;
    end
    $$`.execute(db);

  await db.schema
    .alterTable('teams')
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .execute();
  await db.schema
    .alterTable('roles')
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .execute();
  await db.schema.alterTable('team_members').renameColumn('created_at', 'added_at').execute();
  await db.schema
    .alterTable('team_members')
    .addColumn('added_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .execute();
  await db.schema.alterTable('memberships').addColumn('status_reason', 'text').execute();
  await db.schema
    .alterTable('api_tokens')
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`update api_tokens set updated_at = coalesce(revoked_at, created_at)`.execute(db);
  await db.schema
    .alterTable('passkeys')
    .addColumn('transports', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('backed_up', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('authenticator_name', 'text')
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`update passkeys set updated_at = created_at`.execute(db);

  await sql`alter table roles add constraint roles_system_key_check check (system_key in ('owner', 'admin', 'member', 'billing_admin', 'auditor'))`.execute(db);
  await sql`alter table audit_log add constraint audit_log_actor_type_check check (actor_type in ('user', 'api_token', 'scim', 'mcp_client', 'system', 'operator'))`.execute(
    db,
  );
  await sql`update roles set permissions = '{}' where system_key is not null`.execute(db);

  for (const [table, ignoring] of Object.entries(TOUCHED)) await touchUpdatedAt(db, table, ignoring);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of Object.keys(TOUCHED)) await dropTouchUpdatedAt(db, table);
  await sql`alter table audit_log drop constraint audit_log_actor_type_check`.execute(db);
  await sql`alter table roles drop constraint roles_system_key_check`.execute(db);
  await db.schema.alterTable('passkeys').dropColumn('transports').dropColumn('backed_up').dropColumn('authenticator_name').dropColumn('updated_at').execute();
  await db.schema.alterTable('api_tokens').dropColumn('updated_at').execute();
  await db.schema.alterTable('memberships').dropColumn('status_reason').execute();
  await db.schema.alterTable('team_members').dropColumn('added_by_user_id').execute();
  await db.schema.alterTable('team_members').renameColumn('added_at', 'created_at').execute();
  await db.schema.alterTable('roles').dropColumn('created_by_user_id').execute();
  await db.schema.alterTable('teams').dropColumn('created_by_user_id').execute();
  await sql`drop function touch_updated_at()`.execute(db);
}
