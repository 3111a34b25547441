// The OAuth server's sweep (sweepExpired, run by every client registration and token request)
// looks for what expired in each of its tables; where no index led by the expiry existed, each
// sweep read the whole table, and that table is every live refresh token or grant. An index
// for each condition the sweep asks, so a sweep reads only what it deletes.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('oauth_codes_expiry_idx').on('oauth_codes').column('expires_at').execute();
  await db.schema.createIndex('oauth_refresh_tokens_expiry_idx').on('oauth_refresh_tokens').column('expires_at').execute();
  await db.schema.createIndex('oauth_grants_expiry_idx').on('oauth_grants').column('expires_at').execute();
  await db.schema.createIndex('oauth_grants_revoked_idx').on('oauth_grants').column('revoked_at').where(sql.ref('revoked_at'), 'is not', null).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const name of ['oauth_grants_revoked_idx', 'oauth_grants_expiry_idx', 'oauth_refresh_tokens_expiry_idx', 'oauth_codes_expiry_idx']) {
    await db.schema.dropIndex(name).execute();
  }
}
