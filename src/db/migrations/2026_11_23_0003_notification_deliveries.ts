// The outbox's second half: who caused an event, and one delivery row per event and
// subscribed destination, with its attempts, so delivery survives restarts and is visible.
import { sql, type Kysely } from 'kysely';

const ref = sql`text collate "C"`;

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('outbox')
    .addColumn('actor_type', 'text', (c) =>
      c
        .notNull()
        .defaultTo('system')
        .check(sql`actor_type in ('user', 'scim', 'system')`),
    )
    .addColumn('actor_id', ref)
    .execute();

  await db.schema
    .createTable('notification_deliveries')
    .addColumn('id', sql`text collate "C" primary key check (id ~ '^ndlv_[0-7][0-9a-hjkmnp-tv-z]{25}$')`)
    .addColumn('org_id', ref, (c) => c.notNull())
    .addColumn('destination_id', ref, (c) => c.notNull().references('notification_destinations.id').onDelete('cascade'))
    .addColumn('event_id', ref, (c) => c.notNull().references('outbox.id').onDelete('cascade'))
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('pending')
        .check(sql`status in ('pending', 'delivered', 'failed', 'skipped')`),
    )
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('last_attempt_at', 'timestamptz')
    .addColumn('next_attempt_at', 'timestamptz')
    .addColumn('last_error', 'text')
    .addColumn('delivered_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('notification_deliveries_event_destination_key', ['event_id', 'destination_id'])
    .execute();
  // The worker's queue: pending deliveries by when they are due.
  await sql`create index notification_deliveries_due_idx on notification_deliveries (next_attempt_at) where status = 'pending'`.execute(db);
  // The delivery log of one destination, newest first.
  await db.schema.createIndex('notification_deliveries_destination_idx').on('notification_deliveries').columns(['destination_id', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('notification_deliveries').execute();
  await db.schema.alterTable('outbox').dropColumn('actor_id').dropColumn('actor_type').execute();
}
