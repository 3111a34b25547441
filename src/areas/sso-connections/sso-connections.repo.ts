import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';
import { usersAtDomains } from '../../identity/users';

export type ConnectionRow = Row<'sso_connections'>;
export type ConnectionType = ConnectionRow['type'];
export type ConnectionStatus = ConnectionRow['status'];

export interface ListFilter {
  type?: ConnectionType;
  status?: ConnectionStatus;
  domain?: string;
}

export function listConnections(db: Executor, orgId: string, page: PageRequest, filter: ListFilter) {
  return db
    .selectFrom('sso_connections')
    .selectAll()
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(filter.type !== undefined, (q) => q.where('type', '=', filter.type as ConnectionType))
    .$if(filter.status !== undefined, (q) => q.where('status', '=', filter.status as ConnectionStatus))
    .$if(filter.domain !== undefined, (q) =>
      q.where('id', 'in', (eb) =>
        eb
          .selectFrom('sso_connection_domains')
          .select('connection_id')
          .where('domain', '=', filter.domain as string),
      ),
    )
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findConnection(db: Executor, orgId: string, id: string, forUpdate = false) {
  return db
    .selectFrom('sso_connections')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** A connection by id alone, for the public sign-in endpoints (the id is all they are given). */
export function findConnectionById(db: Executor, id: string) {
  return db.selectFrom('sso_connections').selectAll().where('id', '=', id).executeTakeFirst();
}

export async function domainsOf(db: Executor, ids: readonly string[]): Promise<Map<string, string[]>> {
  const byId = new Map<string, string[]>(ids.map((id) => [id, []]));
  if (ids.length === 0) return byId;
  const rows = await db.selectFrom('sso_connection_domains').select(['connection_id', 'domain']).where('connection_id', 'in', ids).orderBy('domain').execute();
  for (const row of rows) byId.get(row.connection_id)?.push(row.domain);
  return byId;
}

/** The names among `domains` that the organization has not verified. */
export async function unverified(db: Executor, orgId: string, domains: readonly string[]): Promise<string[]> {
  if (domains.length === 0) return [];
  const rows = await db
    .selectFrom('org_domains')
    .select('domain')
    .where('org_id', '=', orgId)
    .where('status', '=', 'verified')
    .where('domain', 'in', domains)
    .execute();
  const verified = new Set(rows.map((r) => r.domain));
  return domains.filter((d) => !verified.has(d));
}

/** The names among `domains` another connection already serves. */
export async function servedElsewhere(db: Executor, domains: readonly string[], exceptId: string | null): Promise<string[]> {
  if (domains.length === 0) return [];
  const rows = await db
    .selectFrom('sso_connection_domains')
    .select('domain')
    .where('domain', 'in', domains)
    .$if(exceptId !== null, (q) => q.where('connection_id', '!=', exceptId as string))
    .execute();
  return rows.map((r) => r.domain);
}

export async function replaceDomains(db: Executor, orgId: string, connectionId: string, domains: readonly string[]): Promise<void> {
  await db.deleteFrom('sso_connection_domains').where('connection_id', '=', connectionId).execute();
  if (domains.length > 0) {
    await db
      .insertInto('sso_connection_domains')
      .values(domains.map((domain) => ({ connection_id: connectionId, org_id: orgId, domain })))
      .execute();
  }
}

export function insertConnection(db: Executor, values: NewRow<'sso_connections'>) {
  return db.insertInto('sso_connections').values(values).returningAll().executeTakeFirstOrThrow();
}

export function updateConnection(db: Executor, orgId: string, id: string, changes: RowChanges<'sso_connections'>) {
  return db.updateTable('sso_connections').set(changes).where('org_id', '=', orgId).where('id', '=', id).returningAll().executeTakeFirst();
}

export function deleteConnection(db: Executor, orgId: string, id: string) {
  return db.deleteFrom('sso_connections').where('org_id', '=', orgId).where('id', '=', id).returning(['id', 'name', 'type']).executeTakeFirst();
}

export async function connectionsWithDefaultRole(db: Executor, orgId: string, roleId: string): Promise<number> {
  const row = await db
    .selectFrom('sso_connections')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .where('jit_default_role_id', '=', roleId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** The connection serving an email domain, whichever organization's. */
export function connectionForDomain(db: Executor, domain: string) {
  return db
    .selectFrom('sso_connection_domains as d')
    .innerJoin('sso_connections as c', 'c.id', 'd.connection_id')
    .selectAll('c')
    .where('d.domain', '=', domain)
    .executeTakeFirst();
}

/**
 * Ends the sessions of people whose address is in `domains` that did not sign in through
 * `connectionId`: enforcement means their other ways in are closed, including the open ones.
 */
export async function endSessionsOutside(db: Executor, connectionId: string, domains: readonly string[], now: Date): Promise<number> {
  if (domains.length === 0) return 0;
  const ended = await db
    .updateTable('sessions')
    .set({ revoked_at: now })
    .where('revoked_at', 'is', null)
    .where((eb) => eb.or([eb('sso_connection_id', 'is', null), eb('sso_connection_id', '!=', connectionId)]))
    .where('user_id', 'in', usersAtDomains(db, domains))
    .returning('id')
    .execute();
  return ended.length;
}
