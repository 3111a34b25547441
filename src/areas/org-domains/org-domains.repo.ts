import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

const COLUMNS = [
  'id',
  'org_id',
  'domain',
  'status',
  'verification_value',
  'verified_at',
  'last_checked_at',
  'last_check_error',
  'auto_join',
  'default_role_id',
  'created_by_user_id',
  'created_at',
  'updated_at',
] as const;

export type DomainRow = Pick<Row<'org_domains'>, (typeof COLUMNS)[number]>;
export type DomainStatus = DomainRow['status'];

export function listDomains(db: Executor, orgId: string, page: PageRequest, filter: { status?: DomainStatus }) {
  return db
    .selectFrom('org_domains')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(filter.status !== undefined, (q) => q.where('status', '=', filter.status as DomainStatus))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findDomain(db: Executor, orgId: string, id: string, forUpdate = false) {
  return db
    .selectFrom('org_domains')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** The organization (other than `exceptOrgId`) that has verified this name, if any. */
export function verifiedElsewhere(db: Executor, domain: string, exceptOrgId: string) {
  return db
    .selectFrom('org_domains')
    .select(['id', 'org_id'])
    .where('domain', '=', domain)
    .where('status', '=', 'verified')
    .where('org_id', '!=', exceptOrgId)
    .executeTakeFirst();
}

export function insertDomain(db: Executor, values: NewRow<'org_domains'>) {
  return db.insertInto('org_domains').values(values).returning(COLUMNS).executeTakeFirstOrThrow();
}

export function updateDomain(db: Executor, orgId: string, id: string, changes: RowChanges<'org_domains'>) {
  return db.updateTable('org_domains').set(changes).where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

export function deleteDomain(db: Executor, orgId: string, id: string) {
  return db.deleteFrom('org_domains').where('org_id', '=', orgId).where('id', '=', id).returning(['id', 'domain', 'status']).executeTakeFirst();
}

/**
 * Takes the domain's turn to be looked up: stamps `last_checked_at` unless the last lookup is
 * more recent than `intervalMs`. Conditional, so concurrent requests on any replica make one
 * lookup. Undefined: no such domain, or not its turn.
 */
export function claimCheck(db: Executor, orgId: string, id: string, at: Date, intervalMs: number) {
  return db
    .updateTable('org_domains')
    .set({ last_checked_at: at })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .where((eb) => eb.or([eb('last_checked_at', 'is', null), eb('last_checked_at', '<=', new Date(at.getTime() - intervalMs))]))
    .returning(COLUMNS)
    .executeTakeFirst();
}

/** Verified domains with auto-join on, by exact name, with the role their joiners get (null: Member). */
export function autoJoinDomains(db: Executor, domain: string) {
  return db
    .selectFrom('org_domains as d')
    .innerJoin('organizations as o', 'o.id', 'd.org_id')
    .select(['d.id', 'd.org_id', 'd.domain', 'd.default_role_id', 'o.name as org_name'])
    .where('d.domain', '=', domain)
    .where('d.status', '=', 'verified')
    .where('d.auto_join', '=', true)
    .orderBy('d.id')
    .execute();
}

export async function domainsWithDefaultRole(db: Executor, orgId: string, roleId: string): Promise<number> {
  const row = await db
    .selectFrom('org_domains')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .where('default_role_id', '=', roleId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
