// Rate-limit counters shared by every replica when RATE_LIMIT_STORE=postgres. The shape is
// the one rate-limiter-flexible's RateLimiterPostgres reads and writes.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('rate_limits')
    .addColumn('key', 'varchar(255)', (c) => c.primaryKey())
    .addColumn('points', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('expire', 'bigint')
    .execute();
  await sql`create index rate_limits_expire_idx on rate_limits (expire)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('rate_limits').ifExists().execute();
}
