// Logging destinations: where an organization's audit entries and tool-call records are
// exported (a generic HTTPS endpoint, Datadog, Splunk HEC, OTLP/HTTP), and each one's queue
// of records still to deliver. The queue is worked one batch at a time per destination, in
// order, so the retry state (attempts, backoff, the lease of the worker sending) lives on the
// destination rather than on each record.
import { sql, type Kysely } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

/** Bookkeeping of tests and deliveries: not an edit of the destination. */
const BOOKKEEPING = [
  'last_test_at',
  'last_test_status',
  'last_test_error',
  'last_delivery_at',
  'last_delivery_error',
  'delivery_attempts',
  'next_delivery_at',
  'delivery_lease_until',
];

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('logging_destinations')
    .addColumn('id', idColumn('obsd'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull().check(sql`type in ('http', 'datadog', 'splunk_hec', 'otlp_http')`))
    // The non-secret settings (url, site, index, source, sourcetype, request_channel, service, header_names).
    .addColumn('config', 'jsonb', (c) => c.notNull())
    // The API key, HEC token or header values, sealed together as one JSON object.
    .addColumn('secrets_enc', 'text')
    .addColumn('record_types', sql`text[]`, (c) => c.notNull())
    .addColumn('is_active', 'boolean', (c) => c.notNull())
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('last_test_at', 'timestamptz')
    .addColumn('last_test_status', 'text', (c) => c.check(sql`last_test_status in ('ok', 'failed')`))
    .addColumn('last_test_error', 'text')
    .addColumn('last_delivery_at', 'timestamptz')
    .addColumn('last_delivery_error', 'text')
    .addColumn('delivery_attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_delivery_at', 'timestamptz')
    .addColumn('delivery_lease_until', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('logging_destinations_org_id_name_key', ['org_id', 'name'])
    .execute();
  // Whether an organization exports a kind of record is asked on every audited write.
  await sql`create index logging_destinations_active_idx on logging_destinations (org_id) include (record_types) where is_active`.execute(db);
  await touchUpdatedAt(db, 'logging_destinations', BOOKKEEPING);

  // One row per record still owed to a destination; deleted once delivered (or dropped).
  await db.schema
    .createTable('logging_deliveries')
    .addColumn('destination_id', reference, (c) => c.notNull().references('logging_destinations.id').onDelete('cascade'))
    .addColumn('event_id', reference, (c) => c.notNull().references('outbox.id').onDelete('cascade'))
    .addPrimaryKeyConstraint('logging_deliveries_pkey', ['destination_id', 'event_id'])
    .execute();
  await sql`create index logging_deliveries_event_idx on logging_deliveries (event_id)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('logging_deliveries').execute();
  await dropTouchUpdatedAt(db, 'logging_destinations');
  await db.schema.dropTable('logging_destinations').execute();
}
