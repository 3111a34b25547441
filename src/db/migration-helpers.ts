// Building blocks for migrations, so that every table is made the same way. Landed
// migrations rely on them: change what they produce only in a way that is safe to re-run.
import { type Kysely, sql } from 'kysely';

/** A primary key holding a prefixed, sortable id (`tbx_01…`), checked by shape. */
export const idColumn = (prefix: string) => sql`text collate "C" primary key check (id ~ ${sql.lit(`^${prefix}_[0-7][0-9a-hjkmnp-tv-z]{25}$`)})`;

/** A column holding another row's id: byte-ordered like the ids themselves. */
export const reference = sql`text collate "C"`;

/**
 * Keeps `updated_at` in one place: the trigger (function touch_updated_at, created by
 * 2026_11_24_210000_spec_columns_and_touched_updates and made to work without arguments by
 * 2026_11_27_105018_touch_updated_at_without_arguments) sets it to now() whenever an update
 * changes the row, unless the update set it itself. `ignoring` names columns whose change is
 * bookkeeping, not an edit (a token's last use, a test delivery's outcome).
 */
export async function touchUpdatedAt(db: Kysely<any>, table: string, ignoring: readonly string[] = []): Promise<void> {
  const args = sql.join(ignoring.map((column) => sql.lit(column)));
  await sql`create trigger ${sql.id(`${table}_touch_updated_at`)} before update on ${sql.table(table)}
    for each row execute function touch_updated_at(${ignoring.length > 0 ? args : sql``})`.execute(db);
}

export async function dropTouchUpdatedAt(db: Kysely<any>, table: string): Promise<void> {
  await sql`drop trigger if exists ${sql.id(`${table}_touch_updated_at`)} on ${sql.table(table)}`.execute(db);
}

/**
 * Makes changes to `table` tell every server to forget the credentials it remembers
 * (src/identity/credential-cache.ts): when the change commits, the trigger (function
 * notify_credentials_changed, created by 2026_11_24_223124_notify_credential_changes)
 * notifies `cp_credentials`. `on` is the trigger's event list: name only the columns an
 * authenticator reads, so that bookkeeping (a token's last use) notifies nothing.
 * Statement-level: a bulk change notifies once.
 */
export function notifyCredentialChanges(db: Kysely<any>, table: string, on: string): Promise<void> {
  return notifyOnCommit(db, table, 'notify_credentials', 'notify_credentials_changed', on);
}

export function dropNotifyCredentialChanges(db: Kysely<any>, table: string): Promise<void> {
  return dropNotifyOnCommit(db, table, 'notify_credentials');
}

/**
 * Makes changes to `table` tell every server to forget the tools its MCP servers serve
 * (src/areas/user-toolboxes/served-tools.ts), as notifyCredentialChanges does for credentials;
 * functions created by 2026_11_26_090001_notify_served_tools_changes. A table with an
 * `org_id` names the organizations changed (a row-level trigger; NOTIFY sends one per
 * organization and transaction), so other organizations' servers stay remembered; one without
 * says nothing more (statement-level: everything is forgotten).
 */
export async function notifyServedToolsChanges(db: Kysely<any>, table: string, on: string, byOrganization: boolean): Promise<void> {
  if (!byOrganization) return notifyOnCommit(db, table, 'notify_served_tools', 'notify_served_tools_changed', on);
  await sql`create trigger ${sql.id(`${table}_notify_served_tools`)} after ${sql.raw(on)} on ${sql.table(table)}
    for each row execute function notify_served_tools_changed_in_org()`.execute(db);
}

export function dropNotifyServedToolsChanges(db: Kysely<any>, table: string): Promise<void> {
  return dropNotifyOnCommit(db, table, 'notify_served_tools');
}

async function notifyOnCommit(db: Kysely<any>, table: string, suffix: string, fn: string, on: string): Promise<void> {
  await sql`create trigger ${sql.id(`${table}_${suffix}`)} after ${sql.raw(on)} on ${sql.table(table)}
    for each statement execute function ${sql.id(fn)}()`.execute(db);
}

async function dropNotifyOnCommit(db: Kysely<any>, table: string, suffix: string): Promise<void> {
  await sql`drop trigger if exists ${sql.id(`${table}_${suffix}`)} on ${sql.table(table)}`.execute(db);
}
