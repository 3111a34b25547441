import type pg from 'pg';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/**
 * What an operator scrapes (`/metrics` on METRICS_PORT), one registry per app: the tests run
 * many apps in one process, and prom-client's default registry is global. Labels come from
 * bounded sets only (operation ids, status classes, connector slugs, consumer names, budget
 * names), never from ids of users, organizations or tokens.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'operation' | 'status'>;
  private readonly requestSeconds: Histogram<'operation'>;
  private readonly toolCalls: Counter<'connector' | 'outcome'>;
  private readonly toolCallSeconds: Histogram<'connector'>;
  private readonly deliveries: Counter<'consumer' | 'outcome'>;
  private readonly destinationSends: Counter<'kind' | 'type' | 'outcome'>;
  private readonly rateLimited: Counter<'budget'>;
  private readonly credentialLookups: Counter<'cache' | 'result'>;
  private readonly perOperation = new Map<string, { seconds: Histogram.Internal<'operation'>; byStatus: Map<string, Counter.Internal> }>();

  /**
   * `outboxLagSeconds` is asked at every scrape (events/outbox.ts reads it from the database);
   * null when the database could not say in time, shown as NaN so that the rest of the scrape
   * still arrives while the database is away, which is when it is wanted most.
   */
  constructor(sources: { outboxLagSeconds: () => Promise<number | null>; pool?: pg.Pool | null; processMetrics?: boolean }) {
    const registers = [this.registry];
    // The process's own (resident memory, heap, open descriptors, event-loop lag, GC): what a
    // soak watches for leaks. Once per process: the tests' many apps in one process leave them out.
    if (sources.processMetrics) collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({
      name: 'cp_http_requests_total',
      help: 'Requests answered on the API port, by operation id (none: no operation matched) and status class (aborted: the client left first).',
      labelNames: ['operation', 'status'],
      registers,
    });
    this.requestSeconds = new Histogram({
      name: 'cp_http_request_duration_seconds',
      help: 'Time from a request arriving to its response ending, by operation id.',
      labelNames: ['operation'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.toolCalls = new Counter({
      name: 'cp_mcp_tool_calls_total',
      help: 'MCP tools/call answered, by connector slug (synthetic: a synthetic tool; none: no tool served by that name) and outcome (succeeded, tool_error, refused, held, unavailable, cancelled).',
      labelNames: ['connector', 'outcome'],
      registers,
    });
    this.toolCallSeconds = new Histogram({
      name: 'cp_mcp_tool_call_duration_seconds',
      help: 'Duration of a tool call as recorded (mostly the upstream MCP server), by connector slug.',
      labelNames: ['connector'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.deliveries = new Counter({
      name: 'cp_outbox_deliveries_total',
      help: 'Outbox deliveries attempted by this process, by consumer (destination type) and outcome (delivered, retrying, failed, skipped).',
      labelNames: ['consumer', 'outcome'],
      registers,
    });
    this.destinationSends = new Counter({
      name: 'cp_destination_deliveries_total',
      help: 'Attempts to deliver to a destination, by kind (notification, logging), destination type (slack, email; http, datadog, splunk_hec, otlp_http) and outcome (delivered; failed: tried again later or given up; dropped: refused by the backend, not tried again).',
      labelNames: ['kind', 'type', 'outcome'],
      registers,
    });
    this.rateLimited = new Counter({
      name: 'cp_rate_limit_refusals_total',
      help: 'Requests refused with 429, by budget (caller, address, auth_failures).',
      labelNames: ['budget'],
      registers,
    });
    this.credentialLookups = new Counter({
      name: 'cp_credential_cache_lookups_total',
      help: 'Credential cache lookups, by cache (caller, access) and result (hit, miss).',
      labelNames: ['cache', 'result'],
      registers,
    });
    // The pool is read before the outbox lag's query takes a connection of it: a scrape collects
    // every metric at once, and would otherwise count its own query as a waiting client.
    const pool = sources.pool;
    if (pool) {
      const poolGauge = (name: string, help: string, read: () => number) =>
        new Gauge({
          name,
          help,
          registers,
          collect() {
            this.set(read());
          },
        });
      poolGauge('cp_db_pool_connections', 'Connections the PostgreSQL pool holds open.', () => pool.totalCount);
      poolGauge('cp_db_pool_idle_connections', 'Pool connections open and not in use.', () => pool.idleCount);
      poolGauge('cp_db_pool_waiting_clients', 'Queries waiting for a pool connection (the pool is exhausted while above 0).', () => pool.waitingCount);
    }
    new Gauge({
      name: 'cp_outbox_lag_seconds',
      help: 'How long the oldest due outbox event has waited to be handed to its consumers (0: none waiting; NaN: the database did not answer); read at each scrape.',
      registers,
      async collect() {
        this.set((await sources.outboxLagSeconds()) ?? Number.NaN);
      },
    });
  }

  request(operation: string | undefined, status: number, aborted: boolean, seconds: number): void {
    const op = operation ?? 'none';
    const cls = aborted ? 'aborted' : statusClass(status);
    // prom-client hashes the labels on every call; the children are looked up once per series.
    let series = this.perOperation.get(op);
    if (!series) this.perOperation.set(op, (series = { seconds: this.requestSeconds.labels({ operation: op }), byStatus: new Map() }));
    let counter = series.byStatus.get(cls);
    if (!counter) series.byStatus.set(cls, (counter = this.requests.labels({ operation: op, status: cls })));
    counter.inc();
    series.seconds.observe(seconds);
  }

  /** `connector`: the slug, `synthetic` for a synthetic tool, `none` for a call that named no tool served. */
  toolCall(connector: string, outcome: string, durationMs: number): void {
    this.toolCalls.inc({ connector, outcome });
    this.toolCallSeconds.observe({ connector }, durationMs / 1000);
  }

  outboxRound(consumer: string, counts: Record<string, number>): void {
    for (const [outcome, count] of Object.entries(counts)) if (count > 0) this.deliveries.inc({ consumer, outcome }, count);
  }

  /** One attempt to deliver to a notification destination (a message) or a logging destination (a batch of records). */
  destinationDelivery(kind: 'notification' | 'logging', type: string, outcome: 'delivered' | 'failed' | 'dropped'): void {
    this.destinationSends.inc({ kind, type, outcome });
  }

  refused(budget: RateLimitBudget): void {
    this.rateLimited.inc({ budget });
  }

  credentialLookup(cache: 'caller' | 'access', hit: boolean): void {
    this.credentialLookups.inc({ cache, result: hit ? 'hit' : 'miss' });
  }

  /** The text format, and its content type, for one scrape. */
  async scrape(): Promise<{ body: string; contentType: string }> {
    return { body: await this.registry.metrics(), contentType: this.registry.contentType };
  }
}

export type RateLimitBudget = 'caller' | 'address' | 'auth_failures';

/**
 * 2xx, 4xx…: statuses grouped, a series per class rather than per code; kept apart, 429 (the
 * rate limit) and 501 (the contract's answer for an operation not built, not a failure).
 */
function statusClass(status: number): string {
  if (status === 429 || status === 501) return String(status);
  return `${Math.floor(status / 100)}xx`;
}
