import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, Migrator, PostgresAdapter, PostgresDialect, sql, type Dialect, type MigrationResultSet, type PostgresPool, type Transaction } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import { loadMigrations } from './migrations';
import { useFastTypeParsers } from './type-parsers';
import type { Database } from './schema';

export type Db = Kysely<Database>;
/** What a repository function runs on: the database, or a transaction a write opened. */
export type Executor = Db | Transaction<Database>;

export interface DatabaseHandle {
  db: Db;
  kind: 'postgres' | 'embedded';
  /** The pg pool behind `db` when on a PostgreSQL server (shared rate-limit counters use it). */
  pool: pg.Pool | null;
  /**
   * Calls `onNotify` with its payload for every NOTIFY on `channel`, from any process on this
   * database; `onLost` when the connection that listens breaks (notifications may have been
   * missed), and `onNotify('')` once it listens (again): anything may have changed.
   * Resolves with a function that stops listening.
   */
  listen(channel: string, onNotify: (payload: string) => void, onLost?: () => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

// int8 (counts, counters) as numbers; the values stay far below 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));
useFastTypeParsers();

export interface DatabaseOptions {
  /** A PostgreSQL URL; without it an embedded PostgreSQL (PGlite) is used. */
  url?: string | null;
  /** Where the embedded database keeps its files; in memory when absent. */
  dataDir?: string | null;
  /**
   * Where LISTEN runs (default: `url`). A pooler in transaction mode hands each transaction
   * another server connection, so a LISTEN through it would be heard by nobody: point this at
   * PostgreSQL itself.
   */
  listenUrl?: string | null;
  /** An embedded database that is already open (tests load one from a snapshot). */
  pglite?: PGlite;
  poolSize?: number;
  /**
   * Named prepared statements (default on). A pooler that hands each transaction another
   * server connection (PgBouncer in transaction mode before 1.21) loses them: turn them off there.
   */
  preparedStatements?: boolean;
  /**
   * How long a query may wait for a pooled connection (a free one, or a new one being opened)
   * before it fails as the database being unavailable (503). Without it a request waits
   * forever for a server that accepts connections but does not answer (frozen, or a network
   * partition), or for a pool that is exhausted. Default 5 s.
   */
  connectTimeoutMs?: number;
  /**
   * PostgreSQL's `statement_timeout` on every pooled connection, asked for at start-up
   * (`options=-c statement_timeout=…`): a statement running longer is cancelled (SQLSTATE
   * 57014, answered 503) instead of holding its connection, and the pool with it, for as long
   * as it runs. 0: none; unset: the server's own setting (the database's or role's) applies.
   * A pooler that does not pass start-up options on (PgBouncer) leaves the server's setting in
   * force either way. PostgreSQL only: the embedded database runs one statement at a time in
   * this process and cannot cancel one.
   */
  statementTimeoutMs?: number;
  /**
   * Told when a pooled connection breaks (the server restarted, an administrator ended it),
   * idle or lent to a request; the pool drops it and opens another when needed. Unheard, it
   * would end the process.
   */
  onConnectionError?: (err: Error) => void;
}

export async function openDatabase(options: DatabaseOptions): Promise<DatabaseHandle> {
  if (options.url) {
    const pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolSize ?? 20,
      options: options.statementTimeoutMs === undefined ? '-c TimeZone=UTC' : `-c TimeZone=UTC -c statement_timeout=${Math.trunc(options.statementTimeoutMs)}`,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 5_000,
      // A server that vanished without closing its connections (a network partition, a host
      // that died) is noticed by TCP keep-alive rather than by the next query hanging.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    });
    // Idle connections are heard through the client listener below; the pool's own 'error'
    // (the same failure) must still have a listener or it would end the process.
    pool.on('error', () => undefined);
    // The pool listens for errors only on idle connections. A connection lent out (a
    // transaction waiting between statements) that breaks emits 'error' on its client, and an
    // unheard 'error' ends the process: every client keeps a listener of its own. The
    // statement in flight fails on its own (503), and the pool drops the dead client on release.
    pool.on('connect', (client) => client.on('error', (err) => options.onConnectionError?.(err)));
    const db = new Kysely<Database>({ dialect: new ServerDialect({ pool: options.preparedStatements === false ? pool : preparingPool(pool) }) });
    const listener = new ServerListener(options.listenUrl || options.url);
    const listen = (channel: string, onNotify: (payload: string) => void, onLost?: () => void) => listener.listen(channel, onNotify, onLost);
    return { db, kind: 'postgres', pool, listen, close: () => db.destroy() };
  }
  let pglite = options.pglite;
  let releaseLock = () => {};
  if (!pglite) {
    if (options.dataDir) {
      mkdirSync(options.dataDir, { recursive: true });
      releaseLock = lockDataDir(options.dataDir);
    }
    try {
      pglite = await PGlite.create(options.dataDir ? join(options.dataDir, 'pgdata') : undefined);
    } catch (err) {
      releaseLock();
      throw err;
    }
  }
  const dialect: Dialect = new EmbeddedDialect(pglite);
  const db = new Kysely<Database>({ dialect });
  const owned = pglite;
  return {
    db,
    kind: 'embedded',
    pool: null,
    listen: async (channel, onNotify) => {
      const stop = await owned.listen(channel, (payload) => onNotify(payload ?? ''));
      // Listening from here on, as on a server: said once now, so a cache may start trusting.
      onNotify('');
      return async () => {
        if (!owned.closed) await stop();
      };
    },
    close: async () => {
      await db.destroy();
      if (!owned.closed) await owned.close();
      releaseLock();
    },
  };
}

// Distinct statements prepared per process; beyond it (say, IN lists of many lengths) queries
// are sent unnamed, so no connection accumulates an unbounded set of prepared statements.
const MAX_PREPARED_STATEMENTS = 1000;
const PREPARABLE = /^\s*(select|insert|update|delete|with)\b/i;

/**
 * Kysely sends every query unnamed, so PostgreSQL parses and plans it each time. Naming each
 * distinct statement (by a hash of its text) lets each connection prepare it once; on the
 * authenticated read path that is most of the database's CPU time.
 */
function preparingPool(pool: pg.Pool): PostgresPool {
  const names = new Map<string, string>();
  const patched = new WeakSet<pg.PoolClient>();
  const nameOf = (text: string): string | undefined => {
    let name = names.get(text);
    if (name === undefined && names.size < MAX_PREPARED_STATEMENTS && PREPARABLE.test(text)) {
      name = `k_${createHash('sha1').update(text).digest('base64url')}`;
      names.set(text, name);
    }
    return name;
  };
  const connect = async (): Promise<pg.PoolClient> => {
    const client = await pool.connect();
    if (!patched.has(client)) {
      patched.add(client);
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      client.query = ((text: unknown, values?: unknown, ...rest: unknown[]) => {
        const name = typeof text === 'string' && Array.isArray(values) ? nameOf(text) : undefined;
        return name ? query({ name, text, values }, ...rest) : query(text, values, ...rest);
      }) as typeof client.query;
    }
    return client;
  };
  return { connect, end: () => pool.end() } as PostgresPool;
}

// How often the listening connection proves it is alive, and how long it may take to answer:
// a connection that died without a word (a network partition) is noticed within seconds.
const LISTEN_HEARTBEAT_MS = 5_000;
const LISTEN_HEARTBEAT_TIMEOUT_MS = 3_000;

/** How the listening connection shows in pg_stat_activity. */
export const LISTENER_NAME = 'mcp-control-plane listener';

interface Follower {
  channel: string;
  onNotify: (payload: string) => void;
  onLost?: () => void;
}

/**
 * LISTEN on a connection of its own (a pooled one would be lent to queries), one for every
 * channel this process follows; reconnecting after a second when it breaks or stops
 * answering. Every follower's `onLost` is told at once, its `onNotify('')` once listening
 * again. The connection closes when the last follower stops.
 */
class ServerListener {
  private readonly followers = new Set<Follower>();
  private current: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private heartbeat: NodeJS.Timeout | null = null;

  constructor(private readonly url: string) {}

  async listen(channel: string, onNotify: (payload: string) => void, onLost?: () => void): Promise<() => Promise<void>> {
    const follower: Follower = { channel, onNotify, onLost };
    this.followers.add(follower);
    try {
      await this.listening(follower);
    } catch (err) {
      await this.unfollow(follower);
      throw err;
    }
    let stopped = false;
    return async () => {
      if (stopped) return;
      stopped = true;
      await this.unfollow(follower);
    };
  }

  /** Resolves once the follower's channel is listened to (connecting first when nobody is), and tells it so. */
  private async listening(follower: Follower): Promise<void> {
    if (!this.current) {
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.retryTimer = null;
      try {
        await this.connectOnce();
      } catch (err) {
        // The others who follow (a connection lost earlier) wait for the next attempt.
        this.retry();
        throw err;
      }
    }
    const client = this.current;
    if (!client) throw new Error('The listening connection was lost while it started.');
    await client.query(`listen ${pg.escapeIdentifier(follower.channel)}`);
    if (client === this.current && this.followers.has(follower)) follower.onNotify('');
  }

  /** One connection attempt at a time, shared by whoever needs it. */
  private connectOnce(): Promise<void> {
    this.connecting ??= this.connect().finally(() => (this.connecting = null));
    return this.connecting;
  }

  private async connect(): Promise<void> {
    const next = new pg.Client({ connectionString: this.url, keepAlive: true, query_timeout: LISTEN_HEARTBEAT_TIMEOUT_MS, application_name: LISTENER_NAME });
    next.on('notification', (message) => {
      if (next !== this.current) return;
      for (const follower of this.followers) if (follower.channel === message.channel) follower.onNotify(message.payload ?? '');
    });
    next.on('error', () => this.lose(next));
    next.on('end', () => this.lose(next));
    const followers = [...this.followers];
    try {
      await next.connect();
      for (const channel of new Set(followers.map((f) => f.channel))) await next.query(`listen ${pg.escapeIdentifier(channel)}`);
    } catch (err) {
      void next.end().catch(() => undefined);
      throw err;
    }
    if (this.followers.size === 0) {
      await next.end().catch(() => undefined);
      return;
    }
    this.current = next;
    this.heartbeat ??= setInterval(() => {
      const client = this.current;
      if (client) client.query('select 1').catch(() => this.lose(client));
    }, LISTEN_HEARTBEAT_MS).unref();
    for (const follower of followers) if (this.followers.has(follower)) follower.onNotify('');
  }

  private lose(client: pg.Client): void {
    if (client !== this.current) return;
    this.current = null;
    for (const follower of this.followers) follower.onLost?.();
    void client.end().catch(() => undefined);
    this.retry();
  }

  private retry(): void {
    if (this.followers.size === 0 || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.current || this.connecting || this.followers.size === 0) return;
      this.connectOnce().catch(() => this.retry());
    }, 1000);
    this.retryTimer.unref();
  }

  private async unfollow(follower: Follower): Promise<void> {
    this.followers.delete(follower);
    const client = this.current;
    if (this.followers.size === 0) {
      if (this.heartbeat) clearInterval(this.heartbeat);
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.heartbeat = null;
      this.retryTimer = null;
      this.current = null;
      await client?.end().catch(() => undefined);
      return;
    }
    if (client && ![...this.followers].some((f) => f.channel === follower.channel)) {
      await client.query(`unlisten ${pg.escapeIdentifier(follower.channel)}`).catch(() => undefined);
    }
  }
}

/** Whether a process of this pid exists (EPERM: it does, owned by someone else). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The embedded database is one process's files: a second process opening them at the same
 * time would corrupt them. A pid file guards against that (a stale one is taken over).
 */
export class DatabaseInUseError extends Error {
  override readonly name = 'DatabaseInUseError';
}

function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, 'pgdata.lock');
  try {
    writeFileSync(file, String(process.pid), { flag: 'wx' });
  } catch {
    const holder = Number(readFileSync(file, 'utf8').trim());
    if (holder && holder !== process.pid && processAlive(holder)) {
      throw new DatabaseInUseError(
        `The embedded database in ${dataDir} is in use by process ${holder}. Stop it first, or set DATABASE_URL to use a PostgreSQL server.`,
      );
    }
    writeFileSync(file, String(process.pid));
  }
  return () => rmSync(file, { force: true });
}

/**
 * PostgreSQL as Kysely speaks it, but for the migration lock, which migrateToLatest takes
 * itself: Kysely's migrator would take a session lock, which behind PgBouncer need not stay on
 * one server connection and, taken inside migrateToLatest's transaction, would outlive the
 * ROLLBACK of a migration that failed.
 */
class MigrationsLockedByCaller extends PostgresAdapter {
  override async acquireMigrationLock(): Promise<void> {}
  override async releaseMigrationLock(): Promise<void> {}
}

class ServerDialect extends PostgresDialect {
  override createAdapter(): PostgresAdapter {
    return new MigrationsLockedByCaller();
  }
}

class EmbeddedDialect extends PGliteDialect {
  override createAdapter(): PostgresAdapter {
    return new MigrationsLockedByCaller();
  }
}

export function migrator(db: Db, options: { disableTransactions?: boolean } = {}): Migrator {
  return new Migrator({ db, provider: { getMigrations: async () => loadMigrations() }, ...options });
}

/** The key Kysely's migrator locks with: a replica of an earlier version that migrates waits for this one, and this one for it. */
const MIGRATION_LOCK = sql.lit(BigInt('3853314791062309107'));

/**
 * Brings the schema to the latest migration. Fails loudly and names the migration that broke.
 *
 * All of it is one transaction of ours, which first lifts the statement timeout and takes the
 * migration lock, both ending with it, then runs Kysely's migrator inside (its own lock and
 * transactions turned off: MigrationsLockedByCaller):
 * - Kysely's lock is a session lock taken before its transaction. Behind PgBouncer in
 *   transaction mode each statement outside a transaction may reach another server
 *   connection: the lock could be taken on one and never released, and the next replica
 *   whose statement lands there would get it again at once (a session holding a lock gets it
 *   again), two replicas then migrating at once. A transaction keeps one server connection
 *   from BEGIN to COMMIT, and a transaction lock ends with it, on success or failure.
 * - Waiting while another replica migrates, or building an index on a large table, is not a
 *   runaway statement: under the statement timeout (DATABASE_STATEMENT_TIMEOUT_MS, or behind
 *   PgBouncer the database's or role's own) it would be cancelled and the replica not start.
 */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const { error, results } = await db.connection().execute(async (connection): Promise<MigrationResultSet> => {
    await sql`begin`.execute(connection);
    try {
      await sql`select set_config('statement_timeout', '0', true)`.execute(connection);
      await sql`select pg_advisory_xact_lock(${MIGRATION_LOCK})`.execute(connection);
      const outcome = await migrator(connection, { disableTransactions: true }).migrateToLatest();
      await sql.raw(outcome.error ? 'rollback' : 'commit').execute(connection);
      return outcome;
    } catch (err) {
      await sql`rollback`.execute(connection).catch(() => undefined);
      throw err;
    }
  });
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    const cause = error instanceof Error ? error.message : String(error);
    throw new Error(`Migration ${failed?.migrationName ?? ''} failed: ${cause}`);
  }
  return (results ?? []).map((r) => r.migrationName);
}
