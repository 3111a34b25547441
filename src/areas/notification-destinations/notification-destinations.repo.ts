import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { DestinationConfig } from '../../events/senders';
import type { PageRequest } from '../../http/pagination';

const COLUMNS = [
  'id',
  'org_id',
  'name',
  'type',
  'config',
  'webhook_url_enc',
  'event_types',
  'is_active',
  'created_by_user_id',
  'last_test_at',
  'last_test_status',
  'last_test_error',
  'created_at',
  'updated_at',
] as const;

/** A destination as stored, its JSON `config` read as the shape it is written in. */
export type DestinationRow = Omit<Pick<Row<'notification_destinations'>, (typeof COLUMNS)[number]>, 'config'> & { config: DestinationConfig };

export function listDestinations(db: Executor, orgId: string, page: PageRequest, filter: { type?: string; is_active?: boolean }) {
  return db
    .selectFrom('notification_destinations')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(filter.type !== undefined, (q) => q.where('type', '=', filter.type as 'slack' | 'email'))
    .$if(filter.is_active !== undefined, (q) => q.where('is_active', '=', filter.is_active as boolean))
    .orderBy('id')
    .limit(page.limit + 1)
    .$castTo<DestinationRow>()
    .execute();
}

export function findDestination(db: Executor, orgId: string, id: string, forUpdate = false) {
  return db
    .selectFrom('notification_destinations')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .$castTo<DestinationRow>()
    .executeTakeFirst();
}

export function insertDestination(db: Executor, values: NewRow<'notification_destinations'>) {
  return db.insertInto('notification_destinations').values(values).returning(COLUMNS).$castTo<DestinationRow>().executeTakeFirstOrThrow();
}

export function updateDestination(db: Executor, orgId: string, id: string, changes: RowChanges<'notification_destinations'>) {
  return db
    .updateTable('notification_destinations')
    .set(changes)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .returning(COLUMNS)
    .$castTo<DestinationRow>()
    .executeTakeFirst();
}

/**
 * Takes the destination's turn to send a test message: stamps `last_test_at` unless the last
 * test is more recent than the cooldown. Undefined: no such destination, or not its turn.
 * Conditional, so that concurrent requests (on any replica) send one message.
 */
export function claimTest(db: Executor, orgId: string, id: string, at: Date, cooldownMs: number) {
  return db
    .updateTable('notification_destinations')
    .set({ last_test_at: at })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .where((eb) => eb.or([eb('last_test_at', 'is', null), eb('last_test_at', '<=', new Date(at.getTime() - cooldownMs))]))
    .returning(COLUMNS)
    .$castTo<DestinationRow>()
    .executeTakeFirst();
}

/** Records a test delivery; not a settings change, so `updated_at` stays (the table's trigger ignores these columns). */
export function recordTest(db: Executor, orgId: string, id: string, test: { at: Date; status: 'ok' | 'failed'; error: string | null }) {
  return db
    .updateTable('notification_destinations')
    .set({ last_test_at: test.at, last_test_status: test.status, last_test_error: test.error })
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .returning(COLUMNS)
    .$castTo<DestinationRow>()
    .executeTakeFirst();
}

export function deleteDestination(db: Executor, orgId: string, id: string) {
  return db.deleteFrom('notification_destinations').where('org_id', '=', orgId).where('id', '=', id).returning(['id', 'name', 'type']).executeTakeFirst();
}

export function findOrganizationName(db: Executor, orgId: string) {
  return db.selectFrom('organizations').select(['name']).where('id', '=', orgId).executeTakeFirst();
}

/** A destination's delivery log, newest first, each with its event. */
export function listDeliveries(db: Executor, orgId: string, destinationId: string, page: PageRequest, filter: { status?: string; event_type?: string }) {
  return db
    .selectFrom('notification_deliveries as nd')
    .innerJoin('outbox as o', 'o.id', 'nd.event_id')
    .select([
      'nd.id',
      'nd.destination_id',
      'nd.status',
      'nd.attempts',
      'nd.last_attempt_at',
      'nd.next_attempt_at',
      'nd.last_error',
      'nd.delivered_at',
      'nd.created_at',
      'o.id as event_id',
      'o.org_id',
      'o.event_type',
      'o.payload',
      'o.created_at as event_created_at',
      'o.actor_type',
      'o.actor_id',
    ])
    .where('nd.org_id', '=', orgId)
    .where('nd.destination_id', '=', destinationId)
    .$if(page.after !== undefined, (q) => q.where('nd.id', '<', page.after as string))
    .$if(filter.status !== undefined, (q) => q.where('nd.status', '=', filter.status as 'pending'))
    .$if(filter.event_type !== undefined, (q) => q.where('o.event_type', '=', filter.event_type as string))
    .orderBy('nd.id', 'desc')
    .limit(page.limit + 1)
    .execute();
}
