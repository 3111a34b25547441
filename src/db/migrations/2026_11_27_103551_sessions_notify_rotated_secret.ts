// A session's secret is replaced when its privileges change (a second factor shown, a
// step-up): every server must forget the old secret at once, so the sessions trigger now
// also fires on token_hash. Everything else it watched stays as it was.
import type { Kysely } from 'kysely';
import { dropNotifyCredentialChanges, notifyCredentialChanges } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await dropNotifyCredentialChanges(db, 'sessions');
  await notifyCredentialChanges(db, 'sessions', 'update of token_hash, revoked_at, expires_at, second_factor_at, step_up_at, user_id or delete');
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropNotifyCredentialChanges(db, 'sessions');
  await notifyCredentialChanges(db, 'sessions', 'update of revoked_at, expires_at, second_factor_at, step_up_at, user_id or delete');
}
