// One OAuth token refresh at a time per connection, whichever replica asks, without holding a
// transaction (and on the embedded database its only connection) while the provider answers:
// `refresh_lease_until` says until when a refresher may spend the connection's refresh token
// (src/mcp/upstream/credentials.ts). Taking and giving back the lease is bookkeeping, not an
// edit: `updated_at` stays, and the column is not among those the cp_served_tools trigger
// names, so it empties no cache.
import type { Kysely } from 'kysely';
import { dropTouchUpdatedAt, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('connections').addColumn('refresh_lease_until', 'timestamptz').execute();
  await dropTouchUpdatedAt(db, 'connections');
  await touchUpdatedAt(db, 'connections', ['last_used_at', 'last_error', 'refresh_lease_until']);
}

export async function down(db: Kysely<any>): Promise<void> {
  await dropTouchUpdatedAt(db, 'connections');
  await touchUpdatedAt(db, 'connections', ['last_used_at', 'last_error']);
  await db.schema.alterTable('connections').dropColumn('refresh_lease_until').execute();
}
