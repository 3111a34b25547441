import { sql, type Kysely, type Transaction } from 'kysely';
import type { Db } from '../db/database';
import type { Database } from '../db/schema';

/**
 * The retry machinery every outbox consumer needs, written once: due deliveries are claimed
 * under a lease (another worker skips them until it expires, and a worker that dies leaves
 * them to be retried: at least once), each is sent outside any transaction, and its outcome
 * recorded: delivered, retried after an exponential backoff, given up as failed after the
 * last attempt, or skipped. A consumer's table keeps the standard columns below.
 */
export interface RetryPolicy {
  /** Deliveries attempted per round. */
  batchSize: number;
  /** Deliveries to one recipient (one destination) per round: one slow endpoint holds back only its own. */
  perRecipient: number;
  /** Recipients sent to at once. */
  concurrency: number;
  /** Attempts before a delivery is given up as `failed`. */
  maxAttempts: number;
  /** A claimed delivery whose worker died is retried after this long. */
  leaseMs: number;
  /** Backoff after the first failure; doubles per attempt up to maxBackoffMs. */
  baseBackoffMs: number;
  maxBackoffMs: number;
}

// perRecipient × the outbound deadline stays well under the lease, so a claim never expires mid-round.
export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  batchSize: 50,
  perRecipient: 3,
  concurrency: 8,
  maxAttempts: 8,
  leaseMs: 60_000,
  baseBackoffMs: 30_000,
  maxBackoffMs: 3_600_000,
};

/** The wait after the `attempts`-th failed attempt: doubling from the base, capped. */
export function backoffMs(policy: Pick<RetryPolicy, 'baseBackoffMs' | 'maxBackoffMs'>, attempts: number): number {
  return Math.min(policy.baseBackoffMs * 2 ** Math.max(0, attempts - 1), policy.maxBackoffMs);
}

/** Tables with the columns a delivery queue reads and writes. */
export type DeliveryTable = {
  [T in keyof Database]: Database[T] extends {
    id: unknown;
    status: unknown;
    attempts: unknown;
    last_attempt_at: unknown;
    next_attempt_at: unknown;
    last_error: unknown;
    delivered_at: unknown;
  }
    ? T
    : never;
}[keyof Database];

export type SendOutcome = { status: 'ok'; error?: null } | { status: 'failed'; error: string } | 'skipped';

export interface DeliveryCounts {
  delivered: number;
  retrying: number;
  failed: number;
  skipped: number;
  [count: string]: number;
}

export interface DeliveryQueue<Claimed extends { id: string; attempts: number }> {
  table: DeliveryTable;
  /** The column naming a delivery's recipient (`destination_id`): each gets its own share of a round. */
  recipient: string;
  recipientOf(delivery: Claimed): string;
  policy: RetryPolicy;
  /** Reads what sending needs for the claimed rows (joined with the destination and the event), in the claim's transaction. */
  load(trx: Transaction<Database>, ids: string[]): Promise<Claimed[]>;
  send(delivery: Claimed): Promise<SendOutcome>;
}

/**
 * One round: claim what is due (at most `perRecipient` per recipient), then send to the
 * recipients concurrently, each recipient's deliveries in order, and record each outcome as
 * it comes. A recipient that answers slowly (up to the outbound deadline per delivery) delays
 * nobody else's. `more` says a recipient may have more due than its share: the dispatcher
 * runs the next round at once, so a busy destination is sent to as fast as it answers, every
 * round still giving each other recipient its share first.
 */
export async function deliverDue<Claimed extends { id: string; attempts: number }>(
  db: Db,
  queue: DeliveryQueue<Claimed>,
  now: Date,
): Promise<{ counts: DeliveryCounts; more: boolean }> {
  // The table is one of several with the same columns; Kysely cannot type a query over a union of them.
  const untyped = db as unknown as Kysely<any>;
  const { table, policy } = queue;
  const claimed = await db.transaction().execute(async (trx) => {
    const due = await sql<{ id: string }>`
      select id from ${sql.table(table)}
      where id in (
        select id from (
          select id, row_number() over (partition by ${sql.ref(queue.recipient)} order by next_attempt_at, id) as turn
          from ${sql.table(table)}
          where status = 'pending' and next_attempt_at <= ${now}
        ) ranked
        where turn <= ${policy.perRecipient}
      )
      order by next_attempt_at
      limit ${policy.batchSize}
      for update skip locked`.execute(trx);
    if (due.rows.length === 0) return [];
    const ids = due.rows.map((d) => d.id);
    await (trx as unknown as Kysely<any>)
      .updateTable(table)
      .set((eb: any) => ({ attempts: eb('attempts', '+', 1), last_attempt_at: now, next_attempt_at: new Date(now.getTime() + policy.leaseMs) }))
      .where('id', 'in', ids)
      .execute();
    return queue.load(trx, ids);
  });

  const counts: DeliveryCounts = { delivered: 0, retrying: 0, failed: 0, skipped: 0 };
  // A recipient that got its whole share and took all of it may have more due; one that failed
  // waits for its backoff, and a full batch may have left others out.
  let more = claimed.length >= policy.batchSize;
  const record = async (delivery: Claimed, outcome: SendOutcome) => {
    const update = untyped.updateTable(table).where('id', '=', delivery.id);
    if (outcome === 'skipped') {
      await update.set({ status: 'skipped', next_attempt_at: null }).execute();
      counts.skipped += 1;
    } else if (outcome.status === 'ok') {
      await update.set({ status: 'delivered', delivered_at: now, next_attempt_at: null, last_error: null }).execute();
      counts.delivered += 1;
    } else if (delivery.attempts >= policy.maxAttempts) {
      await update.set({ status: 'failed', next_attempt_at: null, last_error: outcome.error }).execute();
      counts.failed += 1;
    } else {
      const backoff = backoffMs(policy, delivery.attempts);
      await update.set({ next_attempt_at: new Date(now.getTime() + backoff), last_error: outcome.error }).execute();
      counts.retrying += 1;
    }
  };
  const byRecipient = new Map<string, Claimed[]>();
  for (const delivery of claimed) {
    const key = queue.recipientOf(delivery);
    byRecipient.set(key, [...(byRecipient.get(key) ?? []), delivery]);
  }
  const waiting = [...byRecipient.values()];
  const worker = async () => {
    for (let turn = waiting.shift(); turn; turn = waiting.shift()) {
      let failed = false;
      for (const delivery of turn) {
        const outcome = await queue.send(delivery);
        failed ||= outcome !== 'skipped' && outcome.status === 'failed';
        await record(delivery, outcome);
      }
      if (turn.length >= policy.perRecipient && !failed) more = true;
    }
  };
  await Promise.all(Array.from({ length: Math.min(policy.concurrency, waiting.length) }, worker));
  return { counts, more };
}
