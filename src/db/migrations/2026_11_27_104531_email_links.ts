// Emailed sign-in and sign-up links. Only the token's hash is kept (a database dump signs
// nobody in); a link is used once (`used_at`), and a newer link of the same purpose for the
// same address ends the older ones (`used_at` set without a sign-in). Rows of addresses with
// no account are written too, so that asking costs the same whether or not one exists.
import { type Kysely, sql } from 'kysely';
import { reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('email_links')
    .addColumn('token_hash', 'text', (c) => c.primaryKey())
    .addColumn('purpose', 'text', (c) => c.notNull().check(sql`purpose in ('sign_in', 'sign_up')`))
    .addColumn('email', 'text', (c) => c.notNull())
    .addColumn('user_id', reference, (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('name', 'text')
    .addColumn('return_to', 'text')
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`create index email_links_by_address on email_links (lower(email), purpose, created_at)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('email_links').execute();
}
