// Passkeys (WebAuthn) that can be registered and used.
// - passkeys: the user handle the credential was made for (WebAuthn's `user.id`: random
//   bytes, never the email; an assertion's handle must match it), the authenticator's AAGUID,
//   and whether the credential may be backed up (BE); `backed_up` (BS) changes with use and
//   is bookkeeping, as the counter and last use are, so it does not move `updated_at`.
// - webauthn_challenges: every challenge handed out, single-use and short-lived, with what it
//   is for and the session it is bound to (none for a sign-in from a browser without one),
//   and for a registration the user handle its options named.
import { type Kysely, sql } from 'kysely';
import { dropTouchUpdatedAt, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('passkeys')
    .addColumn('user_handle', 'text', (c) => c.notNull().defaultTo(''))
    .addColumn('aaguid', 'text')
    .addColumn('backup_eligible', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
  await dropTouchUpdatedAt(db, 'passkeys');
  await touchUpdatedAt(db, 'passkeys', ['last_used_at', 'counter', 'backed_up']);
  await db.schema
    .createTable('webauthn_challenges')
    .addColumn('challenge', 'text', (c) => c.primaryKey())
    .addColumn('purpose', 'text', (c) => c.notNull().check(sql`purpose in ('registration', 'authentication', 'step_up')`))
    .addColumn('user_id', reference, (c) => c.references('users.id').onDelete('cascade'))
    .addColumn('session_id', reference, (c) => c.references('sessions.id').onDelete('cascade'))
    .addColumn('user_handle', 'text')
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('webauthn_challenges_expiry').on('webauthn_challenges').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('webauthn_challenges').execute();
  await dropTouchUpdatedAt(db, 'passkeys');
  await touchUpdatedAt(db, 'passkeys', ['last_used_at', 'counter']);
  await db.schema.alterTable('passkeys').dropColumn('backup_eligible').dropColumn('aaguid').dropColumn('user_handle').execute();
}
