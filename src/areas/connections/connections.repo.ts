import { sql } from 'kysely';
import type { Db, Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

const COLUMNS = [
  'id',
  'org_id',
  'connector_slug',
  'owner_user_id',
  'name',
  'status',
  'status_reason',
  'status_changed_at',
  'auth_type',
  'credentials_enc',
  'scopes',
  'last_used_at',
  'last_error',
  'oauth_client_enc',
  'authorize_state_hash',
  'authorize_enc',
  'authorize_expires_at',
  'transferred_from_user_id',
  'transferred_at',
  'awaiting_acceptance',
  'created_at',
  'updated_at',
] as const;

export type ConnectionRow = Pick<Row<'connections'>, (typeof COLUMNS)[number]>;
export type ConnectionChanges = RowChanges<'connections'>;

export interface ListFilter {
  connector_slug?: string;
  status?: ConnectionRow['status'];
  owner_user_id?: string;
}

export function listConnections(db: Executor, orgId: string, page: PageRequest, filter: ListFilter) {
  return db
    .selectFrom('connections')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .$if(filter.owner_user_id !== undefined, (q) => q.where('owner_user_id', '=', filter.owner_user_id as string))
    .$if(filter.connector_slug !== undefined, (q) => q.where('connector_slug', '=', filter.connector_slug as string))
    .$if(filter.status !== undefined, (q) => q.where('status', '=', filter.status as ConnectionRow['status']))
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findConnection(db: Executor, orgId: string, id: string, forUpdate = false): Promise<ConnectionRow | undefined> {
  return db
    .selectFrom('connections')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** Connections of an organization by id (those that exist). */
export function findConnections(db: Executor, orgId: string, ids: readonly string[]): Promise<ConnectionRow[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return db.selectFrom('connections').select(COLUMNS).where('org_id', '=', orgId).where('id', 'in', ids).execute();
}

/** The OAuth callback names a connection without its organization: found by id alone. */
export function findConnectionAnywhere(db: Executor, id: string): Promise<ConnectionRow | undefined> {
  return db.selectFrom('connections').select(COLUMNS).where('id', '=', id).executeTakeFirst();
}

export async function countConnections(db: Executor, orgId: string): Promise<number> {
  const row = await db
    .selectFrom('connections')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export function connectionsOfConnector(db: Executor, orgId: string, slug: string, forUpdate = false): Promise<ConnectionRow[]> {
  return db
    .selectFrom('connections')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('connector_slug', '=', slug)
    .orderBy('id')
    .$if(forUpdate, (q) => q.forUpdate())
    .execute();
}

export function connectionsOfOwner(db: Executor, orgId: string, ownerUserId: string, forUpdate = false): Promise<ConnectionRow[]> {
  return db
    .selectFrom('connections')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('owner_user_id', '=', ownerUserId)
    .orderBy('id')
    .$if(forUpdate, (q) => q.forUpdate())
    .execute();
}

export function insertConnection(db: Executor, values: NewRow<'connections'>): Promise<ConnectionRow> {
  return db.insertInto('connections').values(values).returning(COLUMNS).executeTakeFirstOrThrow();
}

export function updateConnection(db: Executor, orgId: string, id: string, changes: ConnectionChanges): Promise<ConnectionRow | undefined> {
  return db.updateTable('connections').set(changes).where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

/**
 * Takes the authorization in progress whose state hashes to `stateHash`, if it has not
 * expired, and clears it: a state works once, even when two callbacks race (the row is locked).
 */
export function claimAuthorization(db: Db, id: string, stateHash: string, now: Date) {
  return db.transaction().execute(async (trx) => {
    const pending = await trx
      .selectFrom('connections')
      .select(['authorize_enc', 'oauth_client_enc'])
      .where('id', '=', id)
      .where('authorize_state_hash', '=', stateHash)
      .where('authorize_expires_at', '>', now)
      .forUpdate()
      .executeTakeFirst();
    if (!pending) return undefined;
    await trx.updateTable('connections').set({ authorize_state_hash: null, authorize_enc: null, authorize_expires_at: null }).where('id', '=', id).execute();
    return pending;
  });
}

/** Records a use of the connection (bookkeeping: updated_at stays), and the error of the last use or null. */
export function recordUse(db: Executor, id: string, at: Date, error: string | null) {
  return db.updateTable('connections').set({ last_used_at: at, last_error: error }).where('id', '=', id).execute();
}

/** Records why the last authorization or upstream call failed (bookkeeping, like a use). */
export function recordError(db: Executor, id: string, error: string) {
  return db.updateTable('connections').set({ last_error: error }).where('id', '=', id).execute();
}

// ---------------------------------------------------------------------------------------
// The refresh lease: one OAuth token refresh at a time per connection, across replicas
// ---------------------------------------------------------------------------------------

/**
 * Takes the connection's refresh lease for `ms` milliseconds if no one holds it (none taken,
 * or the last one ended), in one statement: of two refreshers, one gets it. Answers the row
 * as it is now and the lease, which names it when it is given back; none when it is held (or
 * the connection is gone). Times are the database's, the one clock all replicas share, kept
 * to the millisecond so that the lease read back compares equal to the one stored.
 */
export async function takeRefreshLease(db: Executor, orgId: string, id: string, ms: number): Promise<{ row: ConnectionRow; lease: Date } | undefined> {
  const taken = await db
    .updateTable('connections')
    .set({ refresh_lease_until: sql<Date>`date_trunc('milliseconds', now()) + ${ms} * interval '1 millisecond'` })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .where((eb) => eb.or([eb('refresh_lease_until', 'is', null), eb('refresh_lease_until', '<', sql<Date>`now()`)]))
    .returning([...COLUMNS, 'refresh_lease_until'])
    .executeTakeFirst();
  if (!taken) return undefined;
  const { refresh_lease_until: lease, ...row } = taken;
  return { row, lease: lease as Date };
}

/** The connection as a refresher waiting for another one sees it, and whether the lease is free to take. */
export async function findRefreshing(db: Executor, orgId: string, id: string): Promise<{ row: ConnectionRow; leaseFree: boolean } | undefined> {
  const found = await db
    .selectFrom('connections')
    .select([...COLUMNS, sql<boolean>`refresh_lease_until is null or refresh_lease_until < now()`.as('lease_free')])
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .executeTakeFirst();
  if (!found) return undefined;
  const { lease_free: leaseFree, ...row } = found;
  return { row, leaseFree };
}

/**
 * Stores refreshed OAuth tokens, unless other credentials were stored since `expected` was
 * read (a reconnect, or a refresher whose lease ran out before ours was taken): those stay.
 * Gives the lease back in the same statement. Answers whether the tokens were stored.
 */
export async function storeRefreshedCredentials(db: Executor, id: string, expected: string | null, next: string, lease: Date): Promise<boolean> {
  const stored = await db
    .updateTable('connections')
    .set((eb) => ({
      credentials_enc: next,
      refresh_lease_until: eb.case().when('refresh_lease_until', '=', lease).then(null).else(eb.ref('refresh_lease_until')).end(),
    }))
    .where('id', '=', id)
    .$if(expected === null, (q) => q.where('credentials_enc', 'is', null))
    .$if(expected !== null, (q) => q.where('credentials_enc', '=', expected as string))
    .executeTakeFirst();
  return stored.numUpdatedRows > 0n;
}

/** Gives the refresh lease back, if it is still this one (one that ran out may have been taken by another). */
export async function releaseRefreshLease(db: Executor, id: string, lease: Date): Promise<void> {
  await db.updateTable('connections').set({ refresh_lease_until: null }).where('id', '=', id).where('refresh_lease_until', '=', lease).execute();
}

export function deleteConnection(db: Executor, orgId: string, id: string) {
  return db.deleteFrom('connections').where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

// ---------------------------------------------------------------------------------------
// The upstream's tools, as last fetched
// ---------------------------------------------------------------------------------------

export function findTools(db: Executor, connectionId: string) {
  return db.selectFrom('connection_tools').select(['tools', 'fetched_at']).where('connection_id', '=', connectionId).executeTakeFirst();
}

export function saveTools(db: Executor, connectionId: string, tools: unknown, fetchedAt: Date) {
  const values = { connection_id: connectionId, tools: JSON.stringify(tools), fetched_at: fetchedAt };
  return db
    .insertInto('connection_tools')
    .values(values)
    .onConflict((oc) => oc.column('connection_id').doUpdateSet({ tools: values.tools, fetched_at: fetchedAt }))
    .execute();
}

/** Forgets the tools fetched with credentials that no longer apply. */
export function forgetTools(db: Executor, connectionId: string) {
  return db.deleteFrom('connection_tools').where('connection_id', '=', connectionId).execute();
}

export function activeMember(db: Executor, orgId: string, userId: string) {
  return db
    .selectFrom('memberships')
    .select(['user_id'])
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .where('status', '=', 'active')
    .executeTakeFirst();
}

// ---------------------------------------------------------------------------------------
// Clients registered at authorization servers (RFC 7591)
// ---------------------------------------------------------------------------------------

export function findRegistration(db: Executor, issuer: string, redirectUri: string) {
  return db
    .selectFrom('oauth_client_registrations')
    .select(['org_id', 'client_enc'])
    .where('issuer', '=', issuer)
    .where('redirect_uri', '=', redirectUri)
    .executeTakeFirst();
}

/** Keeps a registration; one already kept for the issuer and redirect URI (a concurrent start) stays. */
export async function saveRegistration(db: Executor, row: { issuer: string; redirect_uri: string; org_id: string; client_enc: string }): Promise<void> {
  await db
    .insertInto('oauth_client_registrations')
    .values(row)
    .onConflict((oc) => oc.columns(['issuer', 'redirect_uri']).doNothing())
    .execute();
}

/** How many registrations the organization made since `since`, and when the oldest of them was made. */
export async function registrationsSince(db: Executor, orgId: string, since: Date): Promise<{ count: number; oldest: Date | null }> {
  const row = await db
    .selectFrom('oauth_client_registrations')
    .select((eb) => [eb.fn.countAll<string>().as('count'), eb.fn.min('created_at').as('oldest')])
    .where('org_id', '=', orgId)
    .where('created_at', '>', since)
    .executeTakeFirstOrThrow();
  return { count: Number(row.count), oldest: row.oldest ? new Date(row.oldest as unknown as string | Date) : null };
}
