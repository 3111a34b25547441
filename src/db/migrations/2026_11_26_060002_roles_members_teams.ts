// Roles, members and teams: names unique per organization without regard to case
// (as the spec says; the foundation's constraints compare them exactly), why a membership is
// not active as a fixed set of values, and the orders the lists walk (members by joining,
// team members by being added) as keyset indexes. Role and membership changes already
// notify `cp_credentials` (2026_11_24_223124_notify_credential_changes).
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await sql`create unique index roles_org_id_lower_name_key on roles (org_id, lower(name))`.execute(db);
  await sql`create unique index teams_org_id_lower_name_key on teams (org_id, lower(name))`.execute(db);
  await sql`alter table memberships add constraint memberships_status_reason_check
    check (status_reason in ('left', 'removed', 'suspended', 'scim_deactivated', 'scim_deprovisioned'))`.execute(db);
  await db.schema.createIndex('memberships_org_joined_idx').on('memberships').columns(['org_id', 'joined_at', 'user_id']).execute();
  await db.schema.createIndex('team_members_team_added_idx').on('team_members').columns(['team_id', 'added_at', 'user_id']).execute();
  await db.schema.createIndex('role_assignments_role_idx').on('role_assignments').columns(['role_id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('role_assignments_role_idx').execute();
  await db.schema.dropIndex('team_members_team_added_idx').execute();
  await db.schema.dropIndex('memberships_org_joined_idx').execute();
  await sql`alter table memberships drop constraint memberships_status_reason_check`.execute(db);
  await sql`drop index teams_org_id_lower_name_key`.execute(db);
  await sql`drop index roles_org_id_lower_name_key`.execute(db);
}
