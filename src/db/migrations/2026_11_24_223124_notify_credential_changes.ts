// Servers remember what a credential may do (src/auth/credential-cache.ts). Every change that
// could alter that answer notifies `cp_credentials` when it commits, whichever process made
// it (a replica, the operator CLI, a background job), so that every server forgets.
// Bookkeeping columns (a token's last use, a session's last sight) notify nothing.
import { type Kysely, sql } from 'kysely';
import { dropNotifyCredentialChanges, notifyCredentialChanges } from '../migration-helpers';

/** Table → the changes that concern credentials, as a trigger's event list. */
const WATCHED: Record<string, string> = {
  api_tokens: 'update of revoked_at, expires_at, permissions, user_id, org_id or delete',
  sessions: 'update of revoked_at, expires_at, second_factor_at, step_up_at, user_id or delete',
  memberships: 'insert or update or delete',
  roles: 'insert or update or delete',
  role_assignments: 'insert or update or delete',
  organizations: 'update of require_mfa or delete',
};

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function notify_credentials_changed() returns trigger language plpgsql as $$
    begin
      perform pg_notify('cp_credentials', tg_table_name);
      return null;
    end
    $$`.execute(db);
  for (const [table, on] of Object.entries(WATCHED)) await notifyCredentialChanges(db, table, on);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of Object.keys(WATCHED)) await dropNotifyCredentialChanges(db, table);
  await sql`drop function notify_credentials_changed()`.execute(db);
}
