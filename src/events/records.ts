import { sql } from 'kysely';
import type { Db, Executor } from '../db/database';
import type { NewRow } from '../db/schema';
import { newId } from '../lib/ids';

/**
 * Audit entries and tool-call records leave the server through the outbox, like events:
 * written in the same statement as the record itself, so a record that commits is exported
 * at least once and one that rolls back never is. Only organizations with an active logging
 * destination exporting that kind of record get outbox rows; everyone else pays one index
 * probe per statement. The outbox row carries the stored row as it is (`to_jsonb`), and the
 * logging destinations render it in their wire formats when they deliver.
 */

export type RecordKind = 'audit' | 'tool_call';

/** The outbox `event_type` of each kind of record; not organization events (not in the event catalog). */
export const RECORD_EVENT_TYPES: Readonly<Record<RecordKind, string>> = { audit: 'audit.recorded', tool_call: 'tool_call.recorded' };

export const recordKindOf = (eventType: string): RecordKind | null =>
  eventType === RECORD_EVENT_TYPES.audit ? 'audit' : eventType === RECORD_EVENT_TYPES.tool_call ? 'tool_call' : null;

const exported = (kind: RecordKind, orgId: ReturnType<typeof sql.ref>) =>
  sql<boolean>`exists (select 1 from logging_destinations d where d.org_id = ${orgId} and d.is_active and ${kind} = any(d.record_types))`;

/**
 * Appends audit entries, and their outbox rows where they are exported, in one statement.
 * Every writer of `audit_log` goes through here. The outbox id reuses the entry's own ULID,
 * so the export order is the order the entries were written in.
 */
export async function insertAuditEntries(db: Executor, entries: NewRow<'audit_log'> | readonly NewRow<'audit_log'>[]): Promise<void> {
  const rows = Array.isArray(entries) ? entries : [entries as NewRow<'audit_log'>];
  if (rows.length === 0) return;
  await db
    .with('entries', (q) => q.insertInto('audit_log').values(rows).returningAll())
    .insertInto('outbox')
    .columns(['id', 'org_id', 'event_type', 'payload'])
    .expression((eb) =>
      eb
        .selectFrom('entries as e')
        .select([
          sql<string>`'evt_' || substr(e.id, 5)`.as('id'),
          sql<string>`e.org_id`.as('org_id'),
          sql.lit(RECORD_EVENT_TYPES.audit).as('event_type'),
          sql`to_jsonb(e)`.as('payload'),
        ])
        .where(exported('audit', sql.ref('e.org_id'))),
    )
    .execute();
}

/** The columns of a tool-call record as written, with the type of the array each is sent in. */
const TOOL_CALL_COLUMNS = {
  org_id: 'text',
  mcp_server_id: 'text',
  user_id: 'text',
  user_toolbox_id: 'text',
  connection_id: 'text',
  connector_slug: 'text',
  synthetic_tool_id: 'text',
  tool_name: 'text',
  upstream_tool: 'text',
  outcome: 'text',
  error: 'text',
  duration_ms: 'int4',
  request_id: 'text',
  jsonrpc_id: 'text',
  created_at: 'timestamptz',
} as const satisfies Record<Exclude<keyof NewRow<'tool_call_records'>, 'id'>, string>;
type ToolCallColumn = keyof typeof TOOL_CALL_COLUMNS;

/**
 * Inserts a batch of tool-call records, and their outbox rows where they are exported, in
 * one statement. The records' identity ids are given by the database in the order of the
 * batch; the outbox ids, made here in that order, are paired with them by that order.
 *
 * Each column goes as one array parameter (`unnest`), so the statement is the same text for
 * every batch size: prepared once per connection and planned generically, where a VALUES list
 * made a statement per size (each prepared and custom-planned on every connection it met, and
 * up to 500 of them taking the process's budget of prepared statements).
 */
export async function insertToolCallRecords(db: Db, records: readonly NewRow<'tool_call_records'>[]): Promise<void> {
  if (records.length === 0) return;
  const eventIds = records.map(() => newId('event'));
  const columns = Object.keys(TOOL_CALL_COLUMNS) as ToolCallColumn[];
  const arrays = columns.map((column) => {
    const values = records.map((record) => (column === 'created_at' ? (record.created_at ?? new Date()) : (record[column] ?? null)));
    return sql`${values}::${sql.raw(TOOL_CALL_COLUMNS[column])}[]`;
  });
  await sql`
    with inserted as (
      insert into tool_call_records (${sql.join(columns.map((column) => sql.ref(column)))})
      select * from unnest(${sql.join(arrays)})
      returning *
    ),
    numbered as (select *, row_number() over (order by id) as n from inserted)
    insert into outbox (id, org_id, event_type, payload)
    select u.event_id, r.org_id, ${RECORD_EVENT_TYPES.tool_call}, to_jsonb(r) - 'n'
    from numbered r join unnest(${eventIds}::text[]) with ordinality as u(event_id, n) on u.n = r.n
    where ${exported('tool_call', sql.ref('r.org_id'))}`.execute(db);
}

/**
 * Deletes up to `limit` tool-call records written before `before`; answers how many. Only the
 * `limit` oldest rows by id are looked at, through the primary key: ids are given as the
 * batches are written, so id order is the order records were written in, give or take one
 * batch's wait (100 ms), and no index on `created_at` has to slow every INSERT for a deletion
 * that runs hourly. A record just past the boundary out of that order goes in the next round.
 */
export async function deleteExpiredToolCallRecords(db: Db, before: Date, limit: number): Promise<number> {
  const deleted = await db
    .deleteFrom('tool_call_records')
    .where('id', 'in', (q) =>
      q
        .selectFrom((oldest) => oldest.selectFrom('tool_call_records').select(['id', 'created_at']).orderBy('id').limit(limit).as('oldest'))
        .select('oldest.id')
        .where('oldest.created_at', '<', before),
    )
    .executeTakeFirst();
  return Number(deleted.numDeletedRows);
}
