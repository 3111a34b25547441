import { sql, type Transaction } from 'kysely';
import type { Logger } from 'pino';
import type { Db, Executor } from '../db/database';
import type { Database, EventActorType, Row } from '../db/schema';
import { isDatabaseUnavailable } from '../db/unavailable';
import { firstIdAt, newId } from '../lib/ids';
import type { Metrics } from '../lib/metrics';
import { deleteExpiredToolCallRecords } from './records';

/** An event as written to the outbox by the change that caused it. */
export type OutboxEvent = Pick<Row<'outbox'>, 'id' | 'org_id' | 'event_type' | 'payload' | 'created_at' | 'actor_type' | 'actor_id'>;

/**
 * Writes events to the outbox, in the transaction of the change that caused them (ctx.write
 * does this for handlers). Returns their ids.
 */
export async function appendEvents(
  db: Executor,
  orgId: string,
  events: readonly { type: string; data: unknown }[],
  actor: { actor_type: EventActorType; actor_id: string | null },
): Promise<string[]> {
  if (events.length === 0) return [];
  const rows = events.map((e) => ({ id: newId('event'), org_id: orgId, event_type: e.type, payload: JSON.stringify(e.data), ...actor }));
  await db.insertInto('outbox').values(rows).execute();
  return rows.map((r) => r.id);
}

/**
 * How long the oldest due event has waited for the outbox worker, in seconds (0: none due),
 * by the database's clock: the worker's lag, whichever process runs it. One row off the
 * pending index.
 */
export async function outboxLagSeconds(db: Db): Promise<number> {
  const { rows } = await sql<{ lag: number | null }>`
    select extract(epoch from now() - min(available_at))::float8 as lag from outbox where delivered_at is null and available_at <= now()`.execute(db);
  return Math.max(0, rows[0]?.lag ?? 0);
}

/** The event as the API shows it (the `Event` schema): envelope plus the type's data. */
export function eventBody(row: OutboxEvent) {
  return {
    id: row.id,
    type: row.event_type,
    organization_id: row.org_id,
    occurred_at: row.created_at.toISOString(),
    actor: { type: row.actor_type, id: row.actor_type === 'user' ? row.actor_id : null },
    data: row.payload,
  };
}

/**
 * What reads the outbox: notification destinations (events) and logging destinations (audit
 * entries and tool-call records). An area brings its consumer in its area definition (`consumers`).
 */
export interface OutboxConsumer {
  /** Names the consumer in logs and round results. */
  name: string;
  /**
   * Inside the transaction that takes a batch of new events off the outbox: record what this
   * consumer owes for them (its delivery rows). Nothing is lost or doubled: the batch and
   * every consumer's rows commit together.
   */
  fanOut(trx: Transaction<Database>, events: readonly OutboxEvent[], now: Date): Promise<void>;
  /** Outside any transaction: deliver what is due, and say how it went. */
  deliver(now: Date): Promise<DeliveryRound>;
  /** When the worker stops: a consumer that sends in the background finishes what it started. */
  stop?(): Promise<void>;
}

/** What a consumer's delivery round did. */
export interface DeliveryRound {
  /** Deliveries by outcome (delivered, retrying, failed, skipped, …). */
  counts: Record<string, number>;
  /**
   * Deliveries are still due that this round had no room for (a busy destination's backlog):
   * the next round runs at once rather than after a poll.
   */
  more: boolean;
}

export interface OutboxOptions {
  /** Events taken off the outbox per round. */
  batchSize: number;
  /** Events (and, by cascade, what consumers recorded for them) are deleted after this long. */
  retentionMs: number;
  /**
   * Tool-call records (which the outbox exports) are deleted after this long; null: kept for
   * ever. Absent: as null.
   */
  toolCallRecordRetentionMs?: number | null;
}

// 500: audit entries and tool-call records come in bursts; handed over 50 at a time, logging
// destinations delivered about 1,400 records/s on PostgreSQL, 500 at a time about 5,500/s
// per destination (scripts/bench/logging-delivery.ts).
export const DEFAULT_OUTBOX_OPTIONS: OutboxOptions = { batchSize: 500, retentionMs: 30 * 24 * 3_600_000, toolCallRecordRetentionMs: 90 * 24 * 3_600_000 };

export interface RoundResult {
  fannedOut: number;
  /** Each consumer's counts (delivered, retrying, failed, skipped, …). */
  consumers: Record<string, Record<string, number>>;
  /** The same counts summed over the consumers. */
  totals: Record<string, number>;
  /** More is waiting: a full batch of new events, or a consumer's deliveries still due. */
  more: boolean;
}

const RETENTION_EVERY_MS = 3_600_000;
/**
 * Events past retention deleted per statement (with what consumers recorded for them, by
 * cascade): each statement stays short however far behind retention is (a first run on a
 * large outbox, a long outage), so none holds its locks long or runs into the statement
 * timeout; while a batch comes back full the next round deletes on.
 */
export const RETENTION_BATCH = 5_000;

/**
 * Drains the outbox: a round takes new events in a batch (`for update skip locked`, so
 * several processes can run rounds at once), hands them to every consumer in the same
 * transaction, then lets each consumer deliver outside it. A consumer that fails its
 * delivery round is logged and does not hold up the others.
 */
export class OutboxDispatcher {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private lastRetention = 0;
  private databaseAway = false;

  constructor(
    private readonly db: Db,
    private readonly consumers: readonly OutboxConsumer[],
    private readonly logger: Logger,
    private readonly options: OutboxOptions = DEFAULT_OUTBOX_OPTIONS,
    /** Where each consumer's round counts go (the app's metrics). */
    private readonly metrics?: Pick<Metrics, 'outboxRound'>,
  ) {}

  async runOnce(now = new Date()): Promise<RoundResult> {
    const fannedOut = await this.fanOut(now);
    const result: RoundResult = { fannedOut, consumers: {}, totals: {}, more: fannedOut >= this.options.batchSize };
    for (const consumer of this.consumers) {
      try {
        const { counts, more } = await consumer.deliver(now);
        result.consumers[consumer.name] = counts;
        result.more ||= more;
        this.metrics?.outboxRound(consumer.name, counts);
        for (const [name, count] of Object.entries(counts)) result.totals[name] = (result.totals[name] ?? 0) + count;
      } catch (err) {
        this.logger.error({ err, consumer: consumer.name }, 'outbox consumer failed its delivery round');
      }
    }
    if (now.getTime() - this.lastRetention >= RETENTION_EVERY_MS) {
      const deleted = await this.deleteExpired(now);
      if (deleted.events < RETENTION_BATCH && deleted.toolCallRecords < RETENTION_BATCH) this.lastRetention = now.getTime();
    }
    return result;
  }

  /**
   * Deletes up to RETENTION_BATCH events older than the retention, oldest first, and as many
   * tool-call records past theirs; answers how many of each. Event ids are ULIDs minted when
   * the event is written, so "older" is a range of the primary key.
   */
  async deleteExpired(now = new Date()): Promise<{ events: number; toolCallRecords: number }> {
    const bound = firstIdAt('event', new Date(now.getTime() - this.options.retentionMs));
    const deleted = await this.db
      .deleteFrom('outbox')
      .where('id', 'in', (q) => q.selectFrom('outbox').select('id').where('id', '<', bound).orderBy('id').limit(RETENTION_BATCH))
      .executeTakeFirst();
    const keepRecordsMs = this.options.toolCallRecordRetentionMs ?? null;
    const toolCallRecords = keepRecordsMs === null ? 0 : await deleteExpiredToolCallRecords(this.db, new Date(now.getTime() - keepRecordsMs), RETENTION_BATCH);
    return { events: Number(deleted.numDeletedRows), toolCallRecords };
  }

  /**
   * Runs a round now (what was due while no process ran is delivered at start), then every
   * `pollMs` until stop(); a failing round is logged and the next one tries again.
   */
  start(pollMs: number): void {
    if (pollMs <= 0 || this.timer) return;
    const tick = () => {
      let backlog = false;
      this.running = this.runOnce()
        .then((r) => {
          const busy = r.fannedOut > 0 || Object.values(r.totals).some((n) => n > 0);
          if (busy) this.logger.info({ outbox: { fannedOut: r.fannedOut, ...r.consumers } }, 'outbox round');
          // More waiting (a burst of tool-call records, a busy destination's backlog): go on at
          // once rather than hand out one batch, or one share per destination, per poll.
          backlog = r.more;
        })
        .then(
          () => {
            if (this.databaseAway) this.logger.info('outbox: the database answers again; delivering');
            this.databaseAway = false;
          },
          (err: unknown) => {
            // While the database is away every round fails the same way: said once, not once per poll.
            const away = isDatabaseUnavailable(err);
            if (!away) this.logger.error({ err }, 'outbox round failed');
            else if (!this.databaseAway)
              this.logger.warn({ err: { message: (err as Error).message } }, 'outbox: the database cannot be reached; retrying every poll');
            this.databaseAway = away;
          },
        )
        .finally(() => {
          this.running = null;
          if (this.timer) this.timer = setTimeout(tick, backlog ? 0 : pollMs);
        });
    };
    this.timer = setTimeout(tick, 0);
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
    for (const consumer of this.consumers) await consumer.stop?.();
  }

  private async fanOut(now: Date): Promise<number> {
    return this.db.transaction().execute(async (trx) => {
      const events = await trx
        .selectFrom('outbox')
        .select(['id', 'org_id', 'event_type', 'payload', 'created_at', 'actor_type', 'actor_id'])
        .where('delivered_at', 'is', null)
        // available_at was stamped by the database clock, in microseconds: compare with it too.
        .where('available_at', '<=', sql<Date>`greatest(now(), ${now})`)
        .orderBy('id')
        .limit(this.options.batchSize)
        .forUpdate()
        .skipLocked()
        .execute();
      if (events.length === 0) return 0;
      for (const consumer of this.consumers) await consumer.fanOut(trx, events, now);
      await trx
        .updateTable('outbox')
        .set({ delivered_at: now })
        .where(
          'id',
          'in',
          events.map((e) => e.id),
        )
        .execute();
      return events.length;
    });
  }
}
