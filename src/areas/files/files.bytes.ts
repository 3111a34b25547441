import { randomBytes } from 'node:crypto';
import { Transform, type Readable, type TransformCallback } from 'node:stream';
import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { AppDeps } from '../../http/context';
import { ApiError } from '../../http/errors';
import { fitsAccepted, SNIFF_BYTES } from '../../lib/sniff';
import { storageOf, type StoredBytes } from '../../lib/storage';
import { deleteStagedFiles } from './files.repo';

/**
 * The bytes of tool files in storage, and the bookkeeping that keeps storage and the
 * database agreeing (see the migration 2026_11_27_140100_tool_files): every key is written
 * to `storage_sweeps` before its bytes are stored and struck off in the transaction that
 * records them, so bytes whose transaction never committed are found and deleted; keys no
 * row names any more are added there by the table's trigger.
 */

/** A fresh key for one version of a file's bytes: a replaced version never shares the new one's key. */
export const fileKey = (orgId: string, fileId: string) => `file/${orgId}/${fileId}/${randomBytes(8).toString('hex')}`;

const tooLarge = (limit: number) => new ApiError('payload_too_large', `The file is larger than ${limit} bytes.`);

/**
 * Checks bytes as they arrive, before storage keeps them: more than `exact` (or `limit`) is
 * 413 at the first byte too many, fewer than `exact` is `file_size_mismatch` at the end, and
 * the first bytes must fit the `accepted` media types (src/lib/sniff.ts).
 */
export class Intake extends Transform {
  private seen = 0;
  private head: Buffer[] = [];
  private headBytes = 0;
  private checked = false;

  constructor(private readonly rules: { exact?: number; limit?: number; accepted?: readonly string[] }) {
    super();
  }

  private checkHead(): void {
    if (this.checked) return;
    this.checked = true;
    const accepted = this.rules.accepted ?? [];
    const fit = fitsAccepted(Buffer.concat(this.head), accepted);
    this.head = [];
    if (!fit.ok) {
      throw new ApiError(
        'file_type_mismatch',
        `The bytes ${fit.sniffed ? `are ${fit.sniffed}` : 'carry none of the signatures of the accepted types'}; this upload request accepts ${accepted.join(', ')}.`,
      );
    }
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.seen += chunk.length;
    const cap = this.rules.exact ?? this.rules.limit;
    if (cap !== undefined && this.seen > cap) return done(tooLarge(cap));
    try {
      if (!this.checked) {
        this.head.push(chunk);
        this.headBytes += chunk.length;
        if (this.headBytes >= SNIFF_BYTES) this.checkHead();
      }
    } catch (err) {
      return done(err as Error);
    }
    done(null, chunk);
  }

  override _flush(done: TransformCallback): void {
    if (this.rules.exact !== undefined && this.seen !== this.rules.exact) {
      return done(new ApiError('file_size_mismatch', `${this.seen} bytes arrived; the file's place was reserved for exactly ${this.rules.exact}.`));
    }
    try {
      this.checkHead();
    } catch (err) {
      return done(err as Error);
    }
    done();
  }
}

/** `source` piped into `intake`, its errors (an aborted request, 413 from the body reader) passed on rather than lost. */
export function checked(source: Readable, intake: Intake): Intake {
  source.on('error', (err) => intake.destroy(err));
  return source.pipe(intake);
}

/**
 * Stores bytes under a new key, noting the key first (due after FILE_ORPHAN_GRACE_SECONDS)
 * so that it is swept if no transaction ever records it; the recording transaction calls
 * `recorded`. A failure deletes what was stored and rethrows the source's error. `source`
 * is called once storage is ready to read it.
 */
export async function storeBytes(deps: AppDeps, key: string, source: () => Readable, size?: number): Promise<StoredBytes> {
  const grace = deps.config.files.orphanGraceSeconds;
  await deps.db
    .insertInto('storage_sweeps')
    .values({ key, delete_after: sql<Date>`now() + make_interval(secs => ${grace})` })
    .execute();
  try {
    // Opened only now: a stream that flows before storage listens would fail unheard.
    return await storageOf(deps.config).putStream(key, source(), size === undefined ? {} : { size });
  } catch (err) {
    await discard(deps, [key]);
    throw err;
  }
}

/** In the transaction that records the key on a row: its bytes are no longer to be swept. */
export async function recorded(db: Executor, key: string): Promise<void> {
  await db.deleteFrom('storage_sweeps').where('key', '=', key).execute();
}

/** Deletes these keys' bytes and their notes now: bytes whose recording failed go at once rather than after the grace period. */
export async function discard(deps: AppDeps, keys: readonly string[]): Promise<void> {
  const storage = storageOf(deps.config);
  for (const key of keys) {
    try {
      await storage.delete(key);
      await deps.db.deleteFrom('storage_sweeps').where('key', '=', key).execute();
    } catch (err) {
      // Left noted: the sweeper tries again.
      deps.logger.warn({ err, key }, 'stored bytes not deleted');
    }
  }
}

/**
 * Deletes the bytes of due keys (all due ones, or only these), a batch at a time. Each batch
 * is claimed with SKIP LOCKED, so replicas sweeping at once share the work instead of
 * repeating it; a key whose delete fails stays for the next sweep.
 */
export async function collect(deps: AppDeps, only?: readonly string[]): Promise<number> {
  if (only && only.length === 0) return 0;
  const storage = storageOf(deps.config);
  let total = 0;
  for (;;) {
    const done = await deps.db.transaction().execute(async (trx) => {
      const due = await trx
        .selectFrom('storage_sweeps')
        .select('key')
        .where('delete_after', '<=', sql<Date>`now()`)
        .$if(only !== undefined, (q) => q.where('key', 'in', [...(only as string[])]))
        .orderBy('delete_after')
        .limit(100)
        .forUpdate()
        .skipLocked()
        .execute();
      const deleted: string[] = [];
      for (const { key } of due) {
        try {
          await storage.delete(key);
          deleted.push(key);
        } catch (err) {
          deps.logger.warn({ err, key }, 'stored bytes not deleted; the next sweep tries again');
        }
      }
      if (deleted.length > 0) await trx.deleteFrom('storage_sweeps').where('key', 'in', deleted).execute();
      return { claimed: due.length, deleted: deleted.length };
    });
    total += done.deleted;
    if (only || done.claimed < 100 || done.deleted === 0) return total;
  }
}

export interface SweepOutcome {
  expired: number;
  reservationsRemoved: number;
  bytesDeleted: number;
}

/**
 * The periodic clean-up: open upload requests past `expires_at` become `expired` and lose
 * their staged files; places reserved longer than FILE_RESERVATION_TTL_SECONDS without bytes
 * are removed (they hold quota), as are staged files whose request is gone; then the bytes no
 * row names are deleted.
 */
export async function sweep(deps: AppDeps): Promise<SweepOutcome> {
  const ttl = deps.config.files.reservationTtlSeconds;
  const { expired, reservationsRemoved } = await deps.db.transaction().execute(async (trx) => {
    const ended = await trx
      .updateTable('upload_requests')
      .set({ status: 'expired' })
      .where('status', '=', 'open')
      .where('expires_at', '<=', sql<Date>`now()`)
      .returning('id')
      .execute();
    await deleteStagedFiles(
      trx,
      ended.map((r) => r.id),
    );
    const stale = await trx
      .deleteFrom('tool_files')
      .where((eb) =>
        eb.or([
          eb.and([eb('state', '=', 'reserved'), eb('created_at', '<=', sql<Date>`now() - make_interval(secs => ${ttl})`)]),
          // Staged in a request that is gone (deleted with its requester or assignee).
          eb.and([eb('state', '!=', 'stored'), eb('upload_request_id', 'is', null)]),
        ]),
      )
      .executeTakeFirst();
    return { expired: ended.length, reservationsRemoved: Number(stale.numDeletedRows) };
  });
  const bytesDeleted = await collect(deps);
  return { expired, reservationsRemoved, bytesDeleted };
}
