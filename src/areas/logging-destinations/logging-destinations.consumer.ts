import { sql } from 'kysely';
import type { Db } from '../../db/database';
import { backoffMs } from '../../events/delivery-queue';
import type { OutboxConsumer } from '../../events/outbox';
import { recordKindOf, type RecordKind } from '../../events/records';
import type { AppDeps } from '../../http/context';
import { LIMITS, recordOf, type DestinationType, type ExportRecord, type StoredConfig } from './logging-destinations.formats';
import { LoggingSender } from './logging-destinations.sender';

export interface LoggingDeliveryOptions {
  /** Destinations worked at once by this process; each sends one batch at a time, in order. */
  concurrency: number;
  /** Batches one destination sends in a row before it gives its turn up until the next round. */
  batchesPerTurn: number;
  /** Backoff after the first failed attempt, doubling per attempt up to maxBackoffMs (never given up: records wait). */
  baseBackoffMs: number;
  maxBackoffMs: number;
}

export const DEFAULT_LOGGING_DELIVERY: LoggingDeliveryOptions = { concurrency: 16, batchesPerTurn: 10, baseBackoffMs: 5_000, maxBackoffMs: 600_000 };

const senders = new WeakMap<AppDeps, LoggingSender>();

/** The app's one sender (its kept-alive connections are shared by the worker and `test`). */
export function senderFor(deps: AppDeps): LoggingSender {
  let sender = senders.get(deps);
  if (!sender) {
    sender = new LoggingSender({
      outbound: deps.config.outbound,
      datadogIntakeUrl: deps.config.datadogIntakeUrl,
      host: new URL(deps.config.baseUrl).host,
      secrets: deps.secrets,
    });
    senders.set(deps, sender);
  }
  return sender;
}

interface Claimed {
  id: string;
  org_id: string;
  type: DestinationType;
  config: StoredConfig;
  secrets_enc: string | null;
  record_types: string[];
  is_active: boolean;
  delivery_attempts: number;
}

interface Pending {
  event_id: string;
  event_type: string;
  payload: unknown;
}

/**
 * Delivers audit entries and tool-call records to logging destinations. The outbox hands
 * each record over once (`fanOut`): one row per destination exporting it. Each destination's
 * rows are then a queue sent in order, a batch at a time, by one worker at a time (the
 * destination's lease, taken with `skip locked`, holds off other processes): a failed batch
 * is retried with backoff before anything after it is sent. The workers run in the
 * background, each on its own destination: a destination that is down or slow delays only
 * its own records, never a request or another destination, nor the outbox round.
 */
export function loggingDeliveries(deps: AppDeps, options: LoggingDeliveryOptions = DEFAULT_LOGGING_DELIVERY): OutboxConsumer & { settled(): Promise<void> } {
  const db: Db = deps.db;
  const sender = senderFor(deps);
  const working = new Map<string, Promise<void>>();
  // A lease outlives a whole turn however slowly the backend answers, and is given back at its end.
  const leaseMs = (options.batchesPerTurn + 1) * deps.config.outbound.timeoutMs + 30_000;

  async function claim(now: Date): Promise<Claimed[]> {
    const room = options.concurrency - working.size;
    if (room <= 0) return [];
    const busy = [...working.keys()];
    return db.transaction().execute(async (trx) => {
      const due = await trx
        .selectFrom('logging_destinations as d')
        .select('d.id')
        .where((eb) => eb.or([eb('d.next_delivery_at', 'is', null), eb('d.next_delivery_at', '<=', now)]))
        .where((eb) => eb.or([eb('d.delivery_lease_until', 'is', null), eb('d.delivery_lease_until', '<=', now)]))
        .where(({ exists, selectFrom }) =>
          exists(selectFrom('logging_deliveries as ld').select(sql.lit(1).as('one')).whereRef('ld.destination_id', '=', 'd.id')),
        )
        .$if(busy.length > 0, (q) => q.where('d.id', 'not in', busy))
        .orderBy(sql`coalesce(d.next_delivery_at, d.created_at)`)
        .limit(room)
        .forUpdate()
        .skipLocked()
        .execute();
      if (due.length === 0) return [];
      return trx
        .updateTable('logging_destinations')
        .set({ delivery_lease_until: new Date(now.getTime() + leaseMs) })
        .where(
          'id',
          'in',
          due.map((d) => d.id),
        )
        .returning(['id', 'org_id', 'type', 'config', 'secrets_enc', 'record_types', 'is_active', 'delivery_attempts'])
        .$castTo<Claimed>()
        .execute();
    });
  }

  function pending(destinationId: string, limit: number): Promise<Pending[]> {
    return db
      .selectFrom('logging_deliveries as ld')
      .innerJoin('outbox as o', 'o.id', 'ld.event_id')
      .select(['ld.event_id', 'o.event_type', 'o.payload'])
      .where('ld.destination_id', '=', destinationId)
      .orderBy('ld.event_id')
      .limit(limit)
      .execute();
  }

  async function done(destinationId: string, eventIds: readonly string[]): Promise<void> {
    if (eventIds.length === 0) return;
    await db
      .deleteFrom('logging_deliveries')
      .where('destination_id', '=', destinationId)
      .where('event_id', 'in', [...eventIds])
      .execute();
  }

  const setState = (
    id: string,
    state: { last_delivery_at?: Date; last_delivery_error: string | null; delivery_attempts: number; next_delivery_at: Date | null },
  ) => db.updateTable('logging_destinations').set(state).where('id', '=', id).execute();

  /** One destination's turn: its oldest records, a batch at a time, until it has caught up, fails, or used its turn. */
  async function work(destination: Claimed, now: Date): Promise<void> {
    const log = deps.logger.child({ logging_destination_id: destination.id });
    try {
      if (!destination.is_active) {
        // The records of a pause are not sent later.
        await db.deleteFrom('logging_deliveries').where('destination_id', '=', destination.id).execute();
        return;
      }
      const target = sender.open(destination);
      if (typeof target === 'string') {
        deps.metrics.destinationDelivery('logging', destination.type, 'failed');
        await fail(destination, now, target, null);
        return;
      }
      const { records: perRequest, maxAgeMs } = LIMITS[destination.type];
      for (let turn = 0; turn < options.batchesPerTurn; turn++) {
        const rows = await pending(destination.id, perRequest);
        if (rows.length === 0) return;
        const unwanted: string[] = [];
        const batch: { eventId: string; record: ExportRecord }[] = [];
        for (const row of rows) {
          const kind = recordKindOf(row.event_type) as RecordKind | null;
          const record = kind && destination.record_types.includes(kind) ? recordOf(kind, row.payload) : null;
          // Too old for the backend to take (Datadog refuses entries over 18 hours old): dropped, not retried forever.
          if (!record || (maxAgeMs !== null && now.getTime() - Date.parse(record.occurred_at) > maxAgeMs)) unwanted.push(row.event_id);
          else batch.push({ eventId: row.event_id, record });
        }
        if (unwanted.length > 0) {
          log.warn({ dropped: unwanted.length }, 'logging destination: records no longer exported or too old for the backend, dropped');
          await done(destination.id, unwanted);
        }
        if (batch.length === 0) continue;
        const { sent, verdict, detail } = await sender.send(
          target,
          batch.map((b) => b.record),
        );
        const sentIds = batch.slice(0, sent).map((b) => b.eventId);
        deps.metrics.destinationDelivery('logging', destination.type, verdict.kind === 'retry' ? 'failed' : verdict.kind === 'drop' ? 'dropped' : 'delivered');
        if (verdict.kind === 'retry') {
          log.warn(
            { records: sent, attempt: destination.delivery_attempts + 1, reason: verdict.error, detail },
            'logging destination: batch not delivered, retrying',
          );
          await fail(destination, now, verdict.error, verdict.retryAfterMs);
          return;
        }
        await done(destination.id, sentIds);
        if (verdict.kind === 'drop') {
          log.warn({ records: sent, reason: verdict.error, detail }, 'logging destination: batch refused, dropped');
          await setState(destination.id, {
            last_delivery_error: `${verdict.error}; ${sent} records were dropped.`,
            delivery_attempts: 0,
            next_delivery_at: null,
          });
        } else {
          await setState(destination.id, { last_delivery_at: now, last_delivery_error: verdict.warning, delivery_attempts: 0, next_delivery_at: null });
        }
        destination.delivery_attempts = 0;
      }
    } finally {
      await db
        .updateTable('logging_destinations')
        .set({ delivery_lease_until: null })
        .where('id', '=', destination.id)
        .execute()
        .catch((err: unknown) => log.error({ err }, 'logging destination: lease not released'));
    }
  }

  async function fail(destination: Claimed, now: Date, error: string, retryAfterMs: number | null): Promise<void> {
    const attempts = destination.delivery_attempts + 1;
    const wait = Math.min(Math.max(backoffMs(options, attempts), retryAfterMs ?? 0), options.maxBackoffMs);
    await setState(destination.id, {
      last_delivery_error: `${error}; retrying in ${Math.round(wait / 1000)} seconds.`,
      delivery_attempts: attempts,
      next_delivery_at: new Date(now.getTime() + wait),
    });
  }

  return {
    name: 'logging-destinations',
    async fanOut(trx, events) {
      const records = events.filter((e) => recordKindOf(e.event_type) !== null);
      if (records.length === 0) return;
      const destinations = await trx
        .selectFrom('logging_destinations')
        .select(['id', 'org_id', 'record_types'])
        .where('org_id', 'in', [...new Set(records.map((e) => e.org_id))])
        .where('is_active', '=', true)
        .execute();
      const rows = records.flatMap((event) => {
        const kind = recordKindOf(event.event_type) as RecordKind;
        return destinations
          .filter((d) => d.org_id === event.org_id && d.record_types.includes(kind))
          .map((d) => ({ destination_id: d.id, event_id: event.id }));
      });
      if (rows.length > 0) {
        await trx
          .insertInto('logging_deliveries')
          .values(rows)
          .onConflict((oc) => oc.columns(['destination_id', 'event_id']).doNothing())
          .execute();
      }
    },
    async deliver(now) {
      const claimed = await claim(now);
      for (const destination of claimed) {
        const turn = work(destination, now)
          .catch((err: unknown) => deps.logger.error({ err, logging_destination_id: destination.id }, 'logging destination: delivery turn failed'))
          .finally(() => working.delete(destination.id));
        working.set(destination.id, turn);
      }
      // Each claimed destination's turn sends batch after batch in the background, holding the
      // destination meanwhile: an immediate next round could not claim it again.
      return { counts: { started: claimed.length }, more: false };
    },
    /** Resolves when every turn under way in this process has ended (tests, shutdown). */
    async settled() {
      while (working.size > 0) await Promise.allSettled([...working.values()]);
    },
    async stop() {
      await this.settled();
    },
  };
}
