import { sql } from 'kysely';
import { sharedWithQuery } from '../../access/shares';
import type { Executor } from '../../db/database';
import type { Row } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

export type FileRow = Row<'tool_files'>;
export type UploadRequestRow = Omit<Row<'upload_requests'>, 'accepted_content_types'> & { accepted_content_types: string[] };
export type ShareLevel = 'use' | 'edit';

const asRequest = (row: Row<'upload_requests'>): UploadRequestRow => row as unknown as UploadRequestRow;

/** Tool files (stored, not staged) of the organization the user reaches: owned, or shared with them. */
function reachableQuery(db: Executor, orgId: string, userId: string) {
  return db
    .selectFrom('tool_files')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('state', '=', 'stored')
    .where((eb) => eb.or([eb('owner_user_id', '=', userId), eb('id', 'in', sharedWithQuery(db, orgId, userId, 'file'))]));
}

export function findReachableFile(db: Executor, orgId: string, userId: string, id: string): Promise<FileRow | undefined> {
  return reachableQuery(db, orgId, userId).where('id', '=', id).executeTakeFirst();
}

export function listReachableFiles(
  db: Executor,
  orgId: string,
  userId: string,
  page: PageRequest,
  filter: { source?: FileRow['source']; owner_user_id?: string; upload_request_id?: string },
): Promise<FileRow[]> {
  return reachableQuery(db, orgId, userId)
    .$if(filter.source !== undefined, (q) => q.where('source', '=', filter.source as FileRow['source']))
    .$if(filter.owner_user_id !== undefined, (q) => q.where('owner_user_id', '=', filter.owner_user_id as string))
    .$if(filter.upload_request_id !== undefined, (q) => q.where('upload_request_id', '=', filter.upload_request_id as string))
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

/** The highest share level reaching the user for each of the files (directly, through a team, or the organization). */
export async function shareLevels(db: Executor, orgId: string, userId: string, fileIds: readonly string[]): Promise<Map<string, ShareLevel>> {
  const levels = new Map<string, ShareLevel>();
  if (fileIds.length === 0) return levels;
  const rows = await sharedWithQuery(db, orgId, userId, 'file')
    .select('s.level')
    .where('s.resource_id', 'in', [...fileIds])
    .execute();
  for (const row of rows) if (levels.get(row.resource_id) !== 'edit') levels.set(row.resource_id, row.level);
  return levels;
}

export function findFile(db: Executor, orgId: string, id: string, forUpdate = false): Promise<FileRow | undefined> {
  return db
    .selectFrom('tool_files')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

export function insertFile(db: Executor, values: Omit<FileRow, 'created_at' | 'updated_at'>): Promise<FileRow> {
  return db.insertInto('tool_files').values(values).returningAll().executeTakeFirstOrThrow();
}

export function updateFile(db: Executor, orgId: string, id: string, changes: Partial<Omit<FileRow, 'id' | 'org_id'>>): Promise<FileRow> {
  return db.updateTable('tool_files').set(changes).where('org_id', '=', orgId).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

export function deleteFile(db: Executor, orgId: string, id: string): Promise<FileRow | undefined> {
  return db.deleteFrom('tool_files').where('org_id', '=', orgId).where('id', '=', id).returningAll().executeTakeFirst();
}

/** The bytes the organization's files hold, staged ones included (a reservation by its declared size). */
export async function storedBytes(db: Executor, orgId: string): Promise<number> {
  const row = await db
    .selectFrom('tool_files')
    .select(sql<string>`coalesce(sum(size_bytes), 0)`.as('bytes'))
    .where('org_id', '=', orgId)
    .executeTakeFirstOrThrow();
  return Number(row.bytes);
}

export async function isMember(db: Executor, orgId: string, userId: string, activeOnly: boolean): Promise<boolean> {
  const row = await db
    .selectFrom('memberships')
    .select('user_id')
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .$if(activeOnly, (q) => q.where('status', '=', 'active'))
    .executeTakeFirst();
  return !!row;
}

/** An active member of the organization, by id or by email (case-insensitive). */
export function activeMember(
  db: Executor,
  orgId: string,
  by: { userId: string } | { email: string },
): Promise<{ id: string; email: string; name: string | null } | undefined> {
  return db
    .selectFrom('memberships as m')
    .innerJoin('users as u', 'u.id', 'm.user_id')
    .select(['u.id', 'u.email', 'u.name'])
    .where('m.org_id', '=', orgId)
    .where('m.status', '=', 'active')
    .$if('userId' in by, (q) => q.where('u.id', '=', (by as { userId: string }).userId))
    .$if('email' in by, (q) => q.where(sql<string>`lower(u.email)`, '=', (by as { email: string }).email.toLowerCase()))
    .executeTakeFirst();
}

export function userFacts(db: Executor, userId: string): Promise<{ email: string; name: string | null } | undefined> {
  return db.selectFrom('users').select(['email', 'name']).where('id', '=', userId).executeTakeFirst();
}

export async function findUploadRequest(db: Executor, orgId: string, id: string, forUpdate = false): Promise<UploadRequestRow | undefined> {
  const row = await db
    .selectFrom('upload_requests')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
  return row ? asRequest(row) : undefined;
}

export async function insertUploadRequest(
  db: Executor,
  values: Omit<UploadRequestRow, 'created_at' | 'updated_at' | 'status' | 'confirmed_at'>,
): Promise<UploadRequestRow> {
  const row = await db
    .insertInto('upload_requests')
    .values({ ...values, accepted_content_types: JSON.stringify(values.accepted_content_types) })
    .returningAll()
    .executeTakeFirstOrThrow();
  return asRequest(row);
}

export async function closeUploadRequest(
  db: Executor,
  orgId: string,
  id: string,
  status: 'confirmed' | 'expired' | 'cancelled' | 'declined',
  now: Date,
): Promise<UploadRequestRow> {
  const row = await db
    .updateTable('upload_requests')
    .set({ status, ...(status === 'confirmed' ? { confirmed_at: now } : {}) })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
  return asRequest(row);
}

/** The files of an upload request, in the order their places were reserved. */
export function filesOf(db: Executor, uploadRequestId: string): Promise<FileRow[]> {
  return db.selectFrom('tool_files').selectAll().where('upload_request_id', '=', uploadRequestId).orderBy('id').execute();
}

/** Removes the staged (not yet handed over) files of upload requests; their bytes are swept (the table's trigger). */
export async function deleteStagedFiles(db: Executor, uploadRequestIds: readonly string[]): Promise<number> {
  if (uploadRequestIds.length === 0) return 0;
  const result = await db
    .deleteFrom('tool_files')
    .where('upload_request_id', 'in', [...uploadRequestIds])
    .where('state', '!=', 'stored')
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}

export function uploadRequestExists(db: Executor, orgId: string, id: string): Promise<{ id: string } | undefined> {
  return db.selectFrom('upload_requests').select('id').where('org_id', '=', orgId).where('id', '=', id).executeTakeFirst();
}

/** The upload requests a member made or was asked in, oldest first, a page at a time. */
export async function listUploadRequestsOf(
  db: Executor,
  orgId: string,
  userId: string,
  page: PageRequest,
  filter: { role?: 'requester' | 'assignee'; status?: UploadRequestRow['status'] },
  now: Date,
): Promise<UploadRequestRow[]> {
  const rows = await db
    .selectFrom('upload_requests')
    .selectAll()
    .where('org_id', '=', orgId)
    .where((eb) =>
      filter.role === 'requester'
        ? eb('requester_user_id', '=', userId)
        : filter.role === 'assignee'
          ? eb('assignee_user_id', '=', userId)
          : eb.or([eb('requester_user_id', '=', userId), eb('assignee_user_id', '=', userId)]),
    )
    // `expired` is also what an open request past its expiry is, before the sweeper records it.
    .$if(filter.status === 'open', (q) => q.where('status', '=', 'open').where('expires_at', '>', now))
    .$if(filter.status === 'expired', (q) =>
      q.where((eb) => eb.or([eb('status', '=', 'expired'), eb.and([eb('status', '=', 'open'), eb('expires_at', '<=', now)])])),
    )
    .$if(filter.status !== undefined && filter.status !== 'open' && filter.status !== 'expired', (q) =>
      q.where('status', '=', filter.status as UploadRequestRow['status']),
    )
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
  return rows.map(asRequest);
}

/** The files of several upload requests, each request's in the order their places were reserved. */
export async function filesOfMany(db: Executor, uploadRequestIds: readonly string[]): Promise<Map<string, FileRow[]>> {
  const byRequest = new Map<string, FileRow[]>();
  if (uploadRequestIds.length === 0) return byRequest;
  const rows = await db
    .selectFrom('tool_files')
    .selectAll()
    .where('upload_request_id', 'in', [...uploadRequestIds])
    .orderBy('id')
    .execute();
  for (const row of rows) {
    const list = byRequest.get(row.upload_request_id as string) ?? [];
    list.push(row);
    byRequest.set(row.upload_request_id as string, list);
  }
  return byRequest;
}
