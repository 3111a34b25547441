// A person's security events (sign-ins by method, wrong second factors, factor changes,
// recovery codes): the person reads their own (GET /user/me/security-events); the same events
// go to the audit log of each organization they belong to.
import { type Kysely, sql } from 'kysely';
import { idColumn, reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('security_events')
    .addColumn('id', idColumn('sev'))
    .addColumn('user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('type', 'text', (c) =>
      c
        .notNull()
        .check(sql`type in ('signed_in', 'second_factor_failed', 'factor_added', 'factor_removed', 'recovery_code_used', 'recovery_codes_regenerated')`),
    )
    .addColumn('method', 'text')
    .addColumn('ip', 'text')
    .addColumn('user_agent', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('security_events_by_user').on('security_events').columns(['user_id', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('security_events').execute();
}
