import type { Logger } from 'pino';
import type { Db } from '../db/database';
import { storableText } from '../db/unstorable';
import type { NewRow } from '../db/schema';

/**
 * Tool-call records are written off the answer's path and in batches: each call adds its row
 * to its database's buffer, and the buffer goes out as one INSERT a moment later (or at once
 * when it is full), so a busy endpoint spends one statement on many calls. A batch that cannot
 * be written is logged at error. The app waits for what is buffered when it closes.
 */

/** How long a record may wait for others to share its INSERT. */
const FLUSH_AFTER_MS = 100;
/** The most records in one INSERT. */
const BATCH_MAX = 500;

type ToolCallRecord = Omit<NewRow<'tool_call_records'>, 'id'>;

interface Buffer {
  rows: ToolCallRecord[];
  timer: NodeJS.Timeout | null;
  writing: Set<Promise<void>>;
  logger: Logger;
}

const buffers = new Map<Db, Buffer>();

/** The record with NUL characters replaced in its text (PostgreSQL refuses them). */
function storable(row: ToolCallRecord): ToolCallRecord {
  const values = Object.values(row);
  if (!values.some((value) => typeof value === 'string' && value.includes('\u0000'))) return row;
  const copy = { ...row } as Record<string, unknown>;
  for (const [name, value] of Object.entries(copy)) if (typeof value === 'string') copy[name] = storableText(value);
  return copy as unknown as ToolCallRecord;
}

/** Buffers one record; its `created_at` is when the call ended, not when the batch is written. */
export function recordToolCall(db: Db, logger: Logger, row: ToolCallRecord): void {
  let buffer = buffers.get(db);
  if (!buffer) {
    buffer = { rows: [], timer: null, writing: new Set(), logger };
    buffers.set(db, buffer);
  }
  // One row PostgreSQL refuses would lose the whole batch: a client's tool name with a NUL in it included.
  buffer.rows.push(storable(row));
  if (buffer.rows.length >= BATCH_MAX) write(db, buffer);
  else buffer.timer ??= setTimeout(() => write(db, buffer), FLUSH_AFTER_MS);
}

function write(db: Db, buffer: Buffer): void {
  if (buffer.timer) clearTimeout(buffer.timer);
  buffer.timer = null;
  const rows = buffer.rows.splice(0, buffer.rows.length);
  if (rows.length === 0) return;
  const done: Promise<void> = db
    .insertInto('tool_call_records')
    .values(rows)
    .execute()
    .then(
      () => undefined,
      (err: unknown) => buffer.logger.error({ err, records: rows.length, mcp_server_ids: [...new Set(rows.map((r) => r.mcp_server_id))].slice(0, 20) }, 'tool-call records not written'),
    )
    .finally(() => {
      buffer.writing.delete(done);
      if (buffer.rows.length === 0 && buffer.writing.size === 0 && !buffer.timer) buffers.delete(db);
    });
  buffer.writing.add(done);
}

/** Writes what is buffered for `db` and waits for every batch under way (app shutdown, before the database closes). */
export async function flushToolCallRecords(db: Db): Promise<void> {
  const buffer = buffers.get(db);
  if (!buffer) return;
  write(db, buffer);
  while (buffer.writing.size > 0) await Promise.allSettled([...buffer.writing]);
}
