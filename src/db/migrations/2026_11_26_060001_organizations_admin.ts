// Organization administration: the stored logo, the organization's standing with the payment
// provider, and API token names unique per owner.
import { type Kysely, sql } from 'kysely';
import { reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  // The logo's bytes live in storage (src/lib/storage.ts) under logo_key; the row keeps what
  // serving them needs.
  await db.schema
    .alterTable('organizations')
    .addColumn('logo_key', 'text')
    .addColumn('logo_content_type', 'text', (c) => c.check(sql`logo_content_type in ('image/png', 'image/jpeg', 'image/webp')`))
    .addColumn('logo_sha256', 'text')
    .addColumn('logo_bytes', 'integer')
    .execute();

  // The subscription as last read from the payment provider; one row per organization that
  // became its customer. `plan` itself stays on organizations (entitlements read it there).
  await db.schema
    .createTable('organization_billing')
    .addColumn('org_id', reference, (c) => c.primaryKey().references('organizations.id').onDelete('cascade'))
    .addColumn('customer_id', 'text', (c) => c.notNull().unique())
    .addColumn('subscription_id', 'text')
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('none')
        .check(sql`status in ('none', 'trialing', 'active', 'past_due', 'unpaid', 'canceled')`),
    )
    .addColumn('billing_interval', 'text', (c) => c.check(sql`billing_interval in ('month', 'year')`))
    .addColumn('seat_limit', 'integer')
    .addColumn('trial_ends_at', 'timestamptz')
    .addColumn('current_period_start', 'timestamptz')
    .addColumn('current_period_end', 'timestamptz')
    .addColumn('cancel_at_period_end', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('has_payment_method', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('billing_email', 'text')
    .addColumn('reported_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await touchUpdatedAt(db, 'organization_billing');

  // A person's live tokens in one organization are told apart by name (409 name_taken).
  await sql`create unique index api_tokens_owner_name_key on api_tokens (org_id, user_id, name) where revoked_at is null`.execute(db);
  await db.schema.createIndex('api_tokens_org_id_idx').on('api_tokens').columns(['org_id', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('api_tokens_org_id_idx').ifExists().execute();
  await sql`drop index if exists api_tokens_owner_name_key`.execute(db);
  await db.schema.dropTable('organization_billing').ifExists().execute();
  await db.schema
    .alterTable('organizations')
    .dropColumn('logo_key')
    .dropColumn('logo_content_type')
    .dropColumn('logo_sha256')
    .dropColumn('logo_bytes')
    .execute();
}
