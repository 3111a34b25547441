import type { Insertable, Selectable, Updateable } from 'kysely';
import type { DB } from '../../generated/database';

/**
 * The tables, as the migrations build them: generated/database.ts is written by `make
 * generate` from a database migrated to the latest migration, so these types cannot drift
 * from the schema (`make check-generated` fails when they are stale). The names below are
 * the few the code uses often.
 */
export type Database = DB;
export type Row<T extends keyof Database> = Selectable<Database[T]>;
export type NewRow<T extends keyof Database> = Insertable<Database[T]>;
export type RowChanges<T extends keyof Database> = Updateable<Database[T]>;

export type MembershipStatus = Row<'memberships'>['status'];
export type MembershipVia = NonNullable<Row<'memberships'>['via']>;
export type SystemRoleKey = NonNullable<Row<'roles'>['system_key']>;
export type ActorType = Row<'audit_log'>['actor_type'];
export type EventActorType = Row<'outbox'>['actor_type'];
