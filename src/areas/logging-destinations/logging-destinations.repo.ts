import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';
import type { DestinationType, StoredConfig } from './logging-destinations.formats';

const COLUMNS = [
  'd.id',
  'd.org_id',
  'd.name',
  'd.type',
  'd.config',
  'd.secrets_enc',
  'd.record_types',
  'd.is_active',
  'd.created_by_user_id',
  'd.last_test_at',
  'd.last_test_status',
  'd.last_test_error',
  'd.last_delivery_at',
  'd.last_delivery_error',
  'd.next_delivery_at',
  'd.created_at',
  'd.updated_at',
] as const;

type Stored = Pick<
  Row<'logging_destinations'>,
  | 'id'
  | 'org_id'
  | 'name'
  | 'secrets_enc'
  | 'record_types'
  | 'is_active'
  | 'created_by_user_id'
  | 'last_test_at'
  | 'last_test_status'
  | 'last_test_error'
  | 'last_delivery_at'
  | 'last_delivery_error'
  | 'next_delivery_at'
  | 'created_at'
  | 'updated_at'
>;

/** A destination as stored, its JSON `config` read as the shape it is written in, with its count of records waiting. */
export type DestinationRow = Stored & { type: DestinationType; config: StoredConfig; pending_records: number };

const pending = sql<number>`(select count(*)::int from logging_deliveries ld where ld.destination_id = d.id)`.as('pending_records');

export function listDestinations(db: Executor, orgId: string, page: PageRequest, filter: { type?: string; record_type?: string; is_active?: boolean }) {
  return db
    .selectFrom('logging_destinations as d')
    .select([...COLUMNS, pending])
    .where('d.org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('d.id', '>', page.after as string))
    .$if(filter.type !== undefined, (q) => q.where('d.type', '=', filter.type as DestinationType))
    .$if(filter.record_type !== undefined, (q) => q.where(sql<boolean>`${filter.record_type} = any(d.record_types)`))
    .$if(filter.is_active !== undefined, (q) => q.where('d.is_active', '=', filter.is_active as boolean))
    .orderBy('d.id')
    .limit(page.limit + 1)
    .$castTo<DestinationRow>()
    .execute();
}

export function findDestination(db: Executor, orgId: string, id: string, forUpdate = false) {
  return db
    .selectFrom('logging_destinations as d')
    .select([...COLUMNS, pending])
    .where('d.org_id', '=', orgId)
    .where('d.id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .$castTo<DestinationRow>()
    .executeTakeFirst();
}

export async function insertDestination(db: Executor, values: NewRow<'logging_destinations'>): Promise<DestinationRow> {
  await db.insertInto('logging_destinations').values(values).execute();
  return (await findDestination(db, values.org_id, values.id)) as DestinationRow;
}

export async function updateDestination(
  db: Executor,
  orgId: string,
  id: string,
  changes: RowChanges<'logging_destinations'>,
): Promise<DestinationRow | undefined> {
  const updated = await db.updateTable('logging_destinations').set(changes).where('org_id', '=', orgId).where('id', '=', id).returning('id').executeTakeFirst();
  return updated ? findDestination(db, orgId, id) : undefined;
}

/** Drops what a destination still owes: it was paused, or no longer exports these kinds. */
export function dropPending(db: Executor, destinationId: string, eventTypes?: readonly string[]) {
  return db
    .deleteFrom('logging_deliveries')
    .where('destination_id', '=', destinationId)
    .$if(eventTypes !== undefined, (q) =>
      q.where('event_id', 'in', (eb) =>
        eb
          .selectFrom('outbox')
          .select('id')
          .where('event_type', 'in', eventTypes as string[]),
      ),
    )
    .execute();
}

export function deleteDestination(db: Executor, orgId: string, id: string) {
  return db.deleteFrom('logging_destinations').where('org_id', '=', orgId).where('id', '=', id).returning(['id', 'name', 'type']).executeTakeFirst();
}
