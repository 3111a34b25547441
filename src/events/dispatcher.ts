import { sql } from 'kysely';
import type { Logger } from 'pino';
import type { Db } from '../db/database';
import type { Row } from '../db/schema';
import { newId } from '../lib/ids';
import { loadSpec } from '../spec';
import { sendToDestination, type DeliveryOutcome, type SendingDeps } from './senders';

export interface DispatcherOptions {
  /** Events fanned out, and deliveries attempted, per round. */
  batchSize: number;
  /** Attempts before a delivery is given up as `failed`. */
  maxAttempts: number;
  /** A claimed delivery whose worker died is retried after this long (at least once delivery). */
  leaseMs: number;
  /** Backoff after the first failure; doubles per attempt up to maxBackoffMs. */
  baseBackoffMs: number;
  maxBackoffMs: number;
  /** Events and their deliveries are deleted after this long. */
  retentionMs: number;
}

export const DEFAULT_DISPATCHER_OPTIONS: DispatcherOptions = {
  batchSize: 50,
  maxAttempts: 8,
  leaseMs: 60_000,
  baseBackoffMs: 30_000,
  maxBackoffMs: 3_600_000,
  retentionMs: 30 * 24 * 3_600_000,
};

export interface RoundResult {
  fannedOut: number;
  delivered: number;
  retrying: number;
  failed: number;
  skipped: number;
}

const RETENTION_EVERY_MS = 3_600_000;
const eventTitles = loadSpec().components.schemas.EventType['x-enumDescriptions'] as Record<string, string>;

type OutboxRow = Pick<Row<'outbox'>, 'id' | 'org_id' | 'event_type' | 'payload' | 'created_at' | 'actor_type' | 'actor_id'>;

/** The event as the API shows it (the `Event` schema): envelope plus the type's data. */
export function eventBody(row: OutboxRow) {
  return {
    id: row.id,
    type: row.event_type,
    organization_id: row.org_id,
    occurred_at: row.created_at.toISOString(),
    actor: { type: row.actor_type, id: row.actor_type === 'user' ? row.actor_id : null },
    data: row.payload,
  };
}

function render(event: ReturnType<typeof eventBody>, orgName: string): { subject: string; text: string } {
  const title = eventTitles[event.type] ?? event.type;
  return {
    subject: title,
    text: [
      title,
      '',
      `Organization: ${orgName} (${event.organization_id})`,
      `Event: ${event.type} (${event.id})`,
      `When: ${event.occurred_at}`,
      `By: ${event.actor.type === 'user' ? `user ${event.actor.id}` : event.actor.type}`,
      '',
      JSON.stringify(event.data, null, 2),
    ].join('\n'),
  };
}

/**
 * Delivers the outbox to notification destinations. A round fans new events out into one
 * delivery row per active subscribed destination (in one transaction with marking the events
 * done, so nothing is lost or doubled), then claims due deliveries under a lease, sends each
 * outside any transaction, and records the outcome: delivered, retried with exponential
 * backoff, or failed after `maxAttempts`. A worker that dies mid-send leaves its claims to
 * expire and be retried: delivery is at least once. Several processes can run rounds at once
 * (`skip locked`).
 */
export class OutboxDispatcher {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private lastRetention = 0;

  constructor(
    private readonly db: Db,
    private readonly sending: SendingDeps,
    private readonly logger: Logger,
    private readonly options: DispatcherOptions = DEFAULT_DISPATCHER_OPTIONS,
  ) {}

  async runOnce(now = new Date()): Promise<RoundResult> {
    const result: RoundResult = { fannedOut: await this.fanOut(now), delivered: 0, retrying: 0, failed: 0, skipped: 0 };
    const claimed = await this.claim(now);
    const names = await this.organizationNames([...new Set(claimed.map((c) => c.org_id))]);
    for (const delivery of claimed) {
      const outcome = await this.deliver(delivery, names.get(delivery.org_id) ?? delivery.org_id);
      result[await this.record(delivery, outcome, now)] += 1;
    }
    if (now.getTime() - this.lastRetention >= RETENTION_EVERY_MS) {
      this.lastRetention = now.getTime();
      await this.db.deleteFrom('outbox').where('created_at', '<', new Date(now.getTime() - this.options.retentionMs)).execute();
    }
    return result;
  }

  /** Runs rounds every `pollMs` until stop(); a failing round is logged and the next one tries again. */
  start(pollMs: number): void {
    if (pollMs <= 0 || this.timer) return;
    const tick = () => {
      this.running = this.runOnce()
        .then((r) => {
          if (r.fannedOut + r.delivered + r.retrying + r.failed + r.skipped > 0) this.logger.info({ outbox: r }, 'notification deliveries');
        })
        .catch((err) => this.logger.error({ err }, 'outbox round failed'))
        .finally(() => {
          this.running = null;
          if (this.timer) this.timer = setTimeout(tick, pollMs);
        });
    };
    this.timer = setTimeout(tick, pollMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  private async fanOut(now: Date): Promise<number> {
    return this.db.transaction().execute(async (trx) => {
      const events = await trx
        .selectFrom('outbox')
        .select(['id', 'org_id', 'event_type'])
        .where('delivered_at', 'is', null)
        // available_at was stamped by the database clock, in microseconds: compare with it too.
        .where('available_at', '<=', sql<Date>`greatest(now(), ${now})`)
        .orderBy('id')
        .limit(this.options.batchSize)
        .forUpdate()
        .skipLocked()
        .execute();
      if (events.length === 0) return 0;
      const destinations = await trx
        .selectFrom('notification_destinations')
        .select(['id', 'org_id', 'event_types'])
        .where('org_id', 'in', [...new Set(events.map((e) => e.org_id))])
        .where('is_active', '=', true)
        .execute();
      const rows = events.flatMap((event) =>
        destinations
          .filter((d) => d.org_id === event.org_id && d.event_types.includes(event.event_type))
          .map((d) => ({ id: newId('notificationDelivery'), org_id: event.org_id, destination_id: d.id, event_id: event.id, next_attempt_at: now })),
      );
      if (rows.length > 0) {
        await trx.insertInto('notification_deliveries').values(rows).onConflict((oc) => oc.columns(['event_id', 'destination_id']).doNothing()).execute();
      }
      await trx.updateTable('outbox').set({ delivered_at: now }).where('id', 'in', events.map((e) => e.id)).execute();
      return events.length;
    });
  }

  /** Takes due deliveries under a lease: another worker skips them until it expires. */
  private async claim(now: Date) {
    return this.db.transaction().execute(async (trx) => {
      const due = await trx
        .selectFrom('notification_deliveries')
        .select('id')
        .where('status', '=', 'pending')
        .where('next_attempt_at', '<=', now)
        .orderBy('next_attempt_at')
        .limit(this.options.batchSize)
        .forUpdate()
        .skipLocked()
        .execute();
      if (due.length === 0) return [];
      await trx
        .updateTable('notification_deliveries')
        .set((eb) => ({ attempts: eb('attempts', '+', 1), last_attempt_at: now, next_attempt_at: new Date(now.getTime() + this.options.leaseMs) }))
        .where('id', 'in', due.map((d) => d.id))
        .execute();
      return trx
        .selectFrom('notification_deliveries as nd')
        .innerJoin('notification_destinations as d', 'd.id', 'nd.destination_id')
        .innerJoin('outbox as o', 'o.id', 'nd.event_id')
        .select([
          'nd.id', 'nd.org_id', 'nd.attempts',
          'd.id as destination_id', 'd.type', 'd.config', 'd.webhook_url_enc', 'd.is_active', 'd.event_types',
          'o.id as event_id', 'o.event_type', 'o.payload', 'o.created_at', 'o.actor_type', 'o.actor_id',
        ])
        .where('nd.id', 'in', due.map((d) => d.id))
        .orderBy('nd.id')
        .execute();
    });
  }

  private async deliver(delivery: Awaited<ReturnType<OutboxDispatcher['claim']>>[number], orgName: string): Promise<DeliveryOutcome | 'skipped'> {
    // Paused or unsubscribed since the event: the destination forwards nothing.
    if (!delivery.is_active || !delivery.event_types.includes(delivery.event_type)) return 'skipped';
    const event = eventBody({ ...delivery, id: delivery.event_id });
    return sendToDestination(this.sending, { id: delivery.destination_id, type: delivery.type, config: delivery.config, webhook_url_enc: delivery.webhook_url_enc }, render(event, orgName));
  }

  private async record(delivery: { id: string; attempts: number }, outcome: DeliveryOutcome | 'skipped', now: Date): Promise<Exclude<keyof RoundResult, 'fannedOut'>> {
    const update = this.db.updateTable('notification_deliveries').where('id', '=', delivery.id);
    if (outcome === 'skipped') {
      await update.set({ status: 'skipped', next_attempt_at: null }).execute();
      return 'skipped';
    }
    if (outcome.status === 'ok') {
      await update.set({ status: 'delivered', delivered_at: now, next_attempt_at: null, last_error: null }).execute();
      return 'delivered';
    }
    if (delivery.attempts >= this.options.maxAttempts) {
      await update.set({ status: 'failed', next_attempt_at: null, last_error: outcome.error }).execute();
      return 'failed';
    }
    const backoff = Math.min(this.options.baseBackoffMs * 2 ** (delivery.attempts - 1), this.options.maxBackoffMs);
    await update.set({ next_attempt_at: new Date(now.getTime() + backoff), last_error: outcome.error }).execute();
    return 'retrying';
  }

  private async organizationNames(ids: string[]): Promise<Map<string, string>> {
    if (ids.length === 0) return new Map();
    const rows = await this.db.selectFrom('organizations').select(['id', 'name']).where('id', 'in', ids).execute();
    return new Map(rows.map((r) => [r.id, r.name]));
  }
}
