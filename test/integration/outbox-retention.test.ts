// The outbox keeps events for its retention, then deletes them in batches of RETENTION_BATCH,
// oldest first, so that no statement grows with how far behind retention is; a round whose
// batch came back full leaves the next round to delete on, and once caught up it deletes again
// only an hour later. Events inside the retention stay, whatever their number. Tool-call
// records, which the outbox exports, are deleted past their own retention the same way.
import pino from 'pino';
import { ulid } from 'ulid';
import type { DatabaseHandle } from '../../src/db/database';
import { RETENTION_BATCH, OutboxDispatcher } from '../../src/events/outbox';
import { insertToolCallRecords } from '../../src/events/records';
import { firstIdAt, newId } from '../../src/lib/ids';
import { freshDatabase } from '../support/database';

const DAY_MS = 24 * 3_600_000;
const RETENTION_MS = 30 * DAY_MS;
const ORG = newId('organization');

let database: DatabaseHandle;

beforeAll(async () => {
  database = await freshDatabase();
}, 60_000);

afterAll(async () => {
  await database?.close();
});

/** `count` events written `ageMs` before `now` (their ids minted then, as the writer mints them). */
async function writeEvents(now: Date, ageMs: number, count: number): Promise<string[]> {
  const at = now.getTime() - ageMs;
  const ids = Array.from({ length: count }, () => `evt_${ulid(at).toLowerCase()}`).sort();
  for (let i = 0; i < ids.length; i += 1000) {
    await database.db
      .insertInto('outbox')
      .values(ids.slice(i, i + 1000).map((id) => ({ id, org_id: ORG, event_type: 'test.retention', payload: '{}', created_at: new Date(at) })))
      .execute();
  }
  return ids;
}

async function remaining(): Promise<number> {
  const row = await database.db
    .selectFrom('outbox')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', ORG)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

describe('outbox retention', () => {
  it('deletes what is past retention in batches, oldest first, and keeps what is not', async () => {
    const now = new Date();
    // Delivered long ago (so no round takes them as new): only retention concerns them.
    const old = await writeEvents(now, RETENTION_MS + 5 * DAY_MS, RETENTION_BATCH + 3);
    const kept = [...(await writeEvents(now, RETENTION_MS - DAY_MS, 4)), ...(await writeEvents(now, 0, 2))];
    await database.db.updateTable('outbox').set({ delivered_at: now }).where('org_id', '=', ORG).execute();
    const worker = new OutboxDispatcher(database.db, [], pino({ level: 'silent' }), { batchSize: 500, retentionMs: RETENTION_MS });

    // A full batch: the round stops there, the oldest gone first.
    await worker.runOnce(now);
    expect(await remaining()).toBe(3 + kept.length);
    const left = await database.db.selectFrom('outbox').select('id').where('org_id', '=', ORG).orderBy('id').execute();
    expect(left.map((r) => r.id)).toEqual([...old.slice(RETENTION_BATCH), ...kept].sort());

    // The next round deletes on, and stops at the retention.
    await worker.runOnce(now);
    expect(await remaining()).toBe(kept.length);

    // Caught up: the next deletion is an hour later.
    await writeEvents(now, RETENTION_MS + DAY_MS, 1);
    await worker.runOnce(new Date(now.getTime() + 60_000));
    expect(await remaining()).toBe(kept.length + 1);
    await worker.runOnce(new Date(now.getTime() + 3_600_000 + 1));
    expect(await remaining()).toBe(kept.length);
  }, 60_000);

  it('deletes tool-call records past their retention in batches, oldest first; with none set, keeps them', async () => {
    const now = new Date();
    const org = newId('organization');
    const KEEP_MS = 90 * DAY_MS;
    const write = async (ageMs: number, count: number, tool: string) => {
      const at = new Date(now.getTime() - ageMs);
      for (let i = 0; i < count; i += 1000) {
        const rows = Array.from({ length: Math.min(1000, count - i) }, () => ({
          org_id: org,
          mcp_server_id: newId('mcpServer'),
          user_id: newId('user'),
          user_toolbox_id: 'utbx_dyn_all',
          tool_name: tool,
          outcome: 'succeeded',
          duration_ms: 1,
          request_id: 'req_test',
          created_at: at,
        }));
        await insertToolCallRecords(database.db, rows);
      }
    };
    const left = async () =>
      (await database.db.selectFrom('tool_call_records').select('tool_name').where('org_id', '=', org).orderBy('id').execute()).map((r) => r.tool_name);
    // Written in the order of their age, as the batches are.
    await write(KEEP_MS + 10 * DAY_MS, RETENTION_BATCH + 3, 'old');
    await write(KEEP_MS - DAY_MS, 4, 'kept');
    await write(0, 2, 'new');

    // Records kept for ever: the outbox's own retention runs, the records stay.
    await new OutboxDispatcher(database.db, [], pino({ level: 'silent' }), {
      batchSize: 500,
      retentionMs: RETENTION_MS,
      toolCallRecordRetentionMs: null,
    }).runOnce(now);
    expect(await left()).toHaveLength(RETENTION_BATCH + 3 + 6);

    const worker = new OutboxDispatcher(database.db, [], pino({ level: 'silent' }), {
      batchSize: 500,
      retentionMs: RETENTION_MS,
      toolCallRecordRetentionMs: KEEP_MS,
    });
    // A full batch: the oldest go first, and the next round deletes on.
    await worker.runOnce(now);
    expect(await left()).toEqual([...Array(3).fill('old'), ...Array(4).fill('kept'), 'new', 'new']);
    await worker.runOnce(now);
    expect(await left()).toEqual([...Array(4).fill('kept'), 'new', 'new']);

    // Caught up: the next deletion is an hour later.
    await write(KEEP_MS + DAY_MS, 1, 'late');
    await worker.runOnce(new Date(now.getTime() + 60_000));
    expect(await left()).toContain('late');
    await worker.runOnce(new Date(now.getTime() + 3_600_000 + 1));
    expect(await left()).toEqual([...Array(4).fill('kept'), 'new', 'new']);
  }, 60_000);

  it('firstIdAt sorts after every id minted before the instant and not after any minted at or after it', () => {
    const at = Date.UTC(2026, 10, 27, 12, 0, 0, 0);
    const bound = firstIdAt('event', new Date(at));
    for (const offset of [-86_400_000, -1]) expect(`evt_${ulid(at + offset).toLowerCase()}` < bound).toBe(true);
    for (const offset of [0, 1, 86_400_000]) expect(`evt_${ulid(at + offset).toLowerCase()}` >= bound).toBe(true);
  });
});
