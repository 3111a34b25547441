import type { components } from '../../../generated/openapi';
import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

export const COLUMNS = [
  'id',
  'org_id',
  'requester_user_id',
  'restriction_id',
  'connector_slug',
  'tool_name',
  'synthetic_tool_id',
  'reason',
  'status',
  'resolved_by_user_id',
  'resolution_note',
  'resolved_at',
  'exception_expires_at',
  'exception_connector_slug',
  'exception_tool_pattern',
  'created_at',
  'updated_at',
] as const;

export type AccessRequestRow = Pick<Row<'access_requests'>, (typeof COLUMNS)[number]>;
export type AccessRequestStatus = AccessRequestRow['status'];

/** What `access_request.*` events carry (EventAccessRequest). */
export function toEventAccessRequest(row: AccessRequestRow): components['schemas']['EventAccessRequest'] {
  return {
    id: row.id,
    requester_user_id: row.requester_user_id,
    restriction_id: row.restriction_id,
    connector_slug: row.connector_slug,
    tool_name: row.tool_name,
    synthetic_tool_id: row.synthetic_tool_id,
    status: row.status,
    reason: row.reason,
  };
}

export interface ListFilter {
  status?: AccessRequestStatus;
  requester_user_id?: string;
  restriction_id?: string;
}

export function listAccessRequests(db: Executor, orgId: string, page: PageRequest, filter: ListFilter): Promise<AccessRequestRow[]> {
  return db
    .selectFrom('access_requests')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(filter.status !== undefined, (q) => q.where('status', '=', filter.status as AccessRequestStatus))
    .$if(filter.requester_user_id !== undefined, (q) => q.where('requester_user_id', '=', filter.requester_user_id as string))
    .$if(filter.restriction_id !== undefined, (q) => q.where('restriction_id', '=', filter.restriction_id as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findAccessRequest(db: Executor, orgId: string, id: string, forUpdate = false): Promise<AccessRequestRow | undefined> {
  return db
    .selectFrom('access_requests')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

export function insertAccessRequest(db: Executor, values: NewRow<'access_requests'>): Promise<AccessRequestRow> {
  return db.insertInto('access_requests').values(values).returning(COLUMNS).executeTakeFirstOrThrow();
}

/** Moves a pending request on; undefined when it is not pending (any more). */
export function transition(db: Executor, orgId: string, id: string, changes: RowChanges<'access_requests'>): Promise<AccessRequestRow | undefined> {
  return db
    .updateTable('access_requests')
    .set(changes)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .returning(COLUMNS)
    .executeTakeFirst();
}

/** A pending request, or an approval not yet expired, of the member for the same scope. */
export async function openRequestFor(
  db: Executor,
  orgId: string,
  requesterUserId: string,
  scope: { restriction_id: string; connector_slug: string | null; tool_name: string | null },
  now: Date,
): Promise<boolean> {
  const row = await db
    .selectFrom('access_requests')
    .select('id')
    .where('org_id', '=', orgId)
    .where('requester_user_id', '=', requesterUserId)
    .where('restriction_id', '=', scope.restriction_id)
    .where((eb) => (scope.connector_slug === null ? eb('connector_slug', 'is', null) : eb('connector_slug', '=', scope.connector_slug)))
    .where((eb) => (scope.tool_name === null ? eb('tool_name', 'is', null) : eb('tool_name', '=', scope.tool_name)))
    .where((eb) =>
      eb.or([
        eb('status', '=', 'pending'),
        eb.and([eb('status', '=', 'approved'), eb.or([eb('exception_expires_at', 'is', null), eb('exception_expires_at', '>', now)])]),
      ]),
    )
    .executeTakeFirst();
  return !!row;
}

/** Whether any request of the organization names the restriction (requests outlive it). */
export async function restrictionNamed(db: Executor, orgId: string, restrictionId: string): Promise<boolean> {
  const [restriction, request] = await Promise.all([
    db.selectFrom('restrictions').select('id').where('org_id', '=', orgId).where('id', '=', restrictionId).executeTakeFirst(),
    db.selectFrom('access_requests').select('id').where('org_id', '=', orgId).where('restriction_id', '=', restrictionId).limit(1).executeTakeFirst(),
  ]);
  return !!(restriction || request);
}

/** A deleted restriction's pending requests, closed as denied by the system. */
export function closePendingOfRestriction(db: Executor, orgId: string, restrictionId: string, at: Date): Promise<AccessRequestRow[]> {
  return db
    .updateTable('access_requests')
    .set({ status: 'denied', resolved_by_user_id: null, resolved_at: at, resolution_note: 'Closed by the system: the restriction was deleted.' })
    .where('org_id', '=', orgId)
    .where('restriction_id', '=', restrictionId)
    .where('status', '=', 'pending')
    .returning(COLUMNS)
    .execute();
}
