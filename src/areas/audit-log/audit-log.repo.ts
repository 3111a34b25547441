import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { ActorType } from '../../db/schema';

export interface AuditFilter {
  actor_type?: ActorType;
  actor_id?: string;
  action?: string;
  target_type?: string;
  target_id?: string;
  since?: Date;
  until?: Date;
}

const COLUMNS = [
  'a.id',
  'a.actor_type',
  'a.actor_id',
  'a.actor_user_id',
  'a.action',
  'a.target_type',
  'a.target_id',
  'a.changes',
  'a.ip',
  'a.user_agent',
  'a.request_id',
  'a.created_at',
  'u.email as actor_email',
  't.name as token_name',
] as const;

function entries(db: Executor, orgId: string, retainedSince: Date | null) {
  return db
    .selectFrom('audit_log as a')
    .leftJoin('users as u', 'u.id', 'a.actor_user_id')
    .leftJoin('api_tokens as t', (join) => join.onRef('t.id', '=', 'a.actor_id').on('a.actor_type', '=', 'api_token'))
    .select(COLUMNS)
    .where('a.org_id', '=', orgId)
    .$if(retainedSince !== null, (q) => q.where('a.created_at', '>=', retainedSince as Date));
}

export type AuditRow = Awaited<ReturnType<typeof findEntry>> & object;

/**
 * A page of the organization's entries, newest first by (created_at, id): keyset on the
 * index (org_id, created_at, id) or the filter's own index, so a deep page costs what the
 * first does. `after` is the last id of the previous page; its created_at is read by a
 * scalar subquery (exact to the microsecond, which a cursor of milliseconds would not be).
 */
export function listEntries(db: Executor, orgId: string, retainedSince: Date | null, page: { limit: number; after: string | undefined }, filter: AuditFilter) {
  return listEntriesQuery(db, orgId, retainedSince, page, filter).execute();
}

/** The query of listEntries, unexecuted (the bench explains it). */
export function listEntriesQuery(
  db: Executor,
  orgId: string,
  retainedSince: Date | null,
  page: { limit: number; after: string | undefined },
  filter: AuditFilter,
) {
  const { actor_type, actor_id, action, target_type, target_id, since, until } = filter;
  return (
    entries(db, orgId, retainedSince)
      .$if(actor_type !== undefined, (q) => q.where('a.actor_type', '=', actor_type as ActorType))
      // A user id also matches what that user's API tokens and MCP clients did (they act for the user).
      .$if(actor_id !== undefined && actor_id.startsWith('usr_'), (q) => q.where('a.actor_user_id', '=', actor_id as string))
      .$if(actor_id !== undefined && !actor_id.startsWith('usr_'), (q) => q.where('a.actor_id', '=', actor_id as string))
      .$if(action !== undefined && action.endsWith('.*'), (q) => q.where(sql<string>`split_part(a.action, '.', 1)`, '=', (action as string).slice(0, -2)))
      .$if(action !== undefined && !action.endsWith('.*'), (q) => q.where('a.action', '=', action as string))
      .$if(target_type !== undefined, (q) => q.where('a.target_type', '=', target_type as string))
      .$if(target_id !== undefined, (q) => q.where('a.target_id', '=', target_id as string))
      .$if(since !== undefined, (q) => q.where('a.created_at', '>=', since as Date))
      .$if(until !== undefined, (q) => q.where('a.created_at', '<', until as Date))
      .$if(page.after !== undefined, (q) =>
        q.where(
          sql<boolean>`(a.created_at, a.id) < ((select c.created_at from audit_log c where c.org_id = ${orgId} and c.id = ${page.after}), ${page.after})`,
        ),
      )
      .orderBy('a.created_at', 'desc')
      .orderBy('a.id', 'desc')
      .limit(page.limit + 1)
  );
}

export function findEntry(db: Executor, orgId: string, retainedSince: Date | null, id: string) {
  return entries(db, orgId, retainedSince).where('a.id', '=', id).executeTakeFirst();
}
