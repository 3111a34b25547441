// Social sign-in: who a provider says a person is, linked to an account. The link is the
// provider's subject, never the email: an email a provider reports may change, or belong to
// someone else at another provider, so it only picks the account on the first sign-in, and
// only when it names no account yet.
import { type Kysely, sql } from 'kysely';
import { reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('social_identities')
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('issuer', 'text', (c) => c.notNull())
    .addColumn('user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('email', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_sign_in_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('social_identities_pkey', ['provider', 'subject'])
    .execute();
  await db.schema.createIndex('social_identities_by_user').on('social_identities').column('user_id').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('social_identities').execute();
}
