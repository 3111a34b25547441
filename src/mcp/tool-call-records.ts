import type { Logger } from 'pino';
import type { Db } from '../db/database';
import { storableText } from '../db/unstorable';
import { insertToolCallRecords } from '../events/records';
import type { NewRow } from '../db/schema';
import type { Metrics } from '../lib/metrics';

/**
 * Tool-call records are written off the answer's path and in batches: each call adds its row
 * to the app's buffer, and the buffer goes out as one INSERT a moment later (or at once
 * when it is full), so a busy endpoint spends one statement on many calls. A batch that cannot
 * be written is logged at error. The app waits for what is buffered when it closes.
 */

/** How long a record may wait for others to share its INSERT. */
const FLUSH_AFTER_MS = 100;
/** The most records in one INSERT. */
const BATCH_MAX = 500;

export type ToolCallRecord = Omit<NewRow<'tool_call_records'>, 'id'>;

/** The tool-call records of one app (McpRuntime.toolCalls), buffered for their INSERT. */
export class ToolCallRecords {
  private rows: ToolCallRecord[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly writing = new Set<Promise<void>>();

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
    private readonly metrics?: Metrics,
  ) {}

  /** Buffers one record; its `created_at` is when the call ended, not when the batch is written. */
  record(row: ToolCallRecord): void {
    // Every tool call, over MCP or a synthetic tool's run, is recorded here: the one place to count them.
    this.metrics?.toolCall(row.connector_slug ?? (row.synthetic_tool_id ? 'synthetic' : 'none'), row.outcome, row.duration_ms);
    // One row PostgreSQL refuses would lose the whole batch: a client's tool name with a NUL in it included.
    this.rows.push(storable(row));
    if (this.rows.length >= BATCH_MAX) this.write();
    else this.timer ??= setTimeout(() => this.write(), FLUSH_AFTER_MS);
  }

  /** Writes what is buffered and waits for every batch under way (app shutdown, before the database closes). */
  async flush(): Promise<void> {
    this.write();
    while (this.writing.size > 0) await Promise.allSettled([...this.writing]);
  }

  private write(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const rows = this.rows.splice(0, this.rows.length);
    if (rows.length === 0) return;
    const done: Promise<void> = insertToolCallRecords(this.db, rows)
      .then(
        () => undefined,
        (err: unknown) =>
          this.logger.error(
            { err, records: rows.length, mcp_server_ids: [...new Set(rows.map((r) => r.mcp_server_id))].slice(0, 20) },
            'tool-call records not written',
          ),
      )
      .finally(() => this.writing.delete(done));
    this.writing.add(done);
  }
}

/** The record with NUL characters replaced in its text (PostgreSQL refuses them). */
function storable(row: ToolCallRecord): ToolCallRecord {
  const values = Object.values(row);
  if (!values.some((value) => typeof value === 'string' && value.includes('\u0000'))) return row;
  const copy = { ...row } as Record<string, unknown>;
  for (const [name, value] of Object.entries(copy)) if (typeof value === 'string') copy[name] = storableText(value);
  return copy as unknown as ToolCallRecord;
}
