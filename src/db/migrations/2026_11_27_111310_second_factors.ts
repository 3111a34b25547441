// TOTP and recovery codes, and what sessions remember of the second factor they showed.
// - users: the pending enrollment's sealed secret and its deadline (TOTP stays off until a
//   code confirms it), and the last time step a code was accepted for, so a code works once
//   (RFC 6238 §5.2).
// - recovery_codes: hashes of ten one-time codes; a new set replaces the old.
// - second_factor_failures: wrong codes, per person, for the 5-in-15-minutes limit that holds
//   across replicas.
// - sessions.second_factor_method: how the session's second factor was shown.
import { type Kysely, sql } from 'kysely';
import { reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('users')
    .addColumn('totp_pending_secret_enc', 'text')
    .addColumn('totp_pending_expires_at', 'timestamptz')
    .addColumn('totp_last_step', 'integer')
    .execute();
  await db.schema
    .alterTable('sessions')
    .addColumn('second_factor_method', 'text', (c) => c.check(sql`second_factor_method in ('totp', 'recovery_code', 'passkey')`))
    .execute();
  await db.schema
    .createTable('recovery_codes')
    .addColumn('user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('code_hash', 'text', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('recovery_codes_pkey', ['user_id', 'code_hash'])
    .execute();
  await db.schema
    .createTable('second_factor_failures')
    .addColumn('user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('failed_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('second_factor_failures_by_user').on('second_factor_failures').columns(['user_id', 'failed_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('second_factor_failures').execute();
  await db.schema.dropTable('recovery_codes').execute();
  await db.schema.alterTable('sessions').dropColumn('second_factor_method').execute();
  await db.schema.alterTable('users').dropColumn('totp_last_step').dropColumn('totp_pending_expires_at').dropColumn('totp_pending_secret_enc').execute();
}
