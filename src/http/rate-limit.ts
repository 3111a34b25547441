import type { Redis } from 'ioredis';
import type pg from 'pg';
import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Caller } from '../identity/credentials';
import { ApiError } from './errors';
import type { RateLimitBudget } from '../lib/metrics';

/** Where the counters live: this process, or a store every replica shares. */
export type CounterStore = { kind: 'memory' } | { kind: 'postgres'; pool: pg.Pool } | { kind: 'redis'; client: Redis };

export interface RateLimitSettings {
  /** Requests per window, per authenticated credential or, without one, per client address. */
  points: number;
  durationSeconds: number;
  /** Failed authentications per client address per window. */
  authFailures: number;
  store: CounterStore;
  /** Told of every refusal, by budget (the app's metrics). */
  onRefused?: (budget: RateLimitBudget) => void;
}

function limiter(store: CounterStore, keyPrefix: string, points: number, duration: number): RateLimiterAbstract {
  const memory = new RateLimiterMemory({ points, duration, keyPrefix });
  // The in-memory limiter stands in while a shared store cannot answer, so an outage of the
  // counter store does not turn into an outage of the API.
  if (store.kind === 'postgres') {
    return new RateLimiterPostgres({
      storeClient: store.pool,
      storeType: 'pool',
      tableName: 'rate_limits',
      tableCreated: true,
      clearExpiredByTimeout: true,
      keyPrefix,
      points,
      duration,
      insuranceLimiter: memory,
    });
  }
  if (store.kind === 'redis') {
    // Not ready (reconnecting): straight to the stand-in, without asking a connection that is not there.
    return new RateLimiterRedis({ storeClient: store.client, keyPrefix, points, duration, insuranceLimiter: memory, rejectIfRedisNotReady: true });
  }
  return memory;
}

const tooMany = (what: string, rejection: RateLimiterRes) => refusal(what, rejection.msBeforeNext);

/**
 * A fixed window per key, in this process, as rate-limiter-flexible's RateLimiterMemory counts
 * (the window opens at a key's first request and lasts `durationMs`; past `points` requests in
 * it, each is refused until it closes), but answering synchronously: on the memory store a
 * request pays no promise, timer or result object for its budget.
 */
class MemoryWindows {
  private readonly counts = new Map<string, { consumed: number; endsAt: number }>();
  private nextSweep = 0;

  constructor(
    private readonly points: number,
    private readonly durationMs: number,
  ) {}

  /** Counts one request; null when within the budget, else how many ms until the window closes. */
  take(key: string, now = Date.now()): number | null {
    let entry = this.counts.get(key);
    if (!entry || entry.endsAt <= now) {
      this.sweep(now);
      entry = { consumed: 0, endsAt: now + this.durationMs };
      this.counts.set(key, entry);
    }
    entry.consumed += 1;
    return entry.consumed > this.points ? entry.endsAt - now : null;
  }

  /** Without counting: null while requests remain, else how many ms until the window closes. */
  exhausted(key: string, now = Date.now()): number | null {
    const entry = this.counts.get(key);
    return entry && entry.endsAt > now && entry.consumed >= this.points ? entry.endsAt - now : null;
  }

  /** Forgets closed windows, at most once per window length, so idle keys do not accumulate. */
  private sweep(now: number): void {
    if (now < this.nextSweep) return;
    this.nextSweep = now + this.durationMs;
    for (const [key, entry] of this.counts) if (entry.endsAt <= now) this.counts.delete(key);
  }
}

const refusal = (what: string, msBeforeNext: number) => {
  const seconds = Math.max(1, Math.ceil(msBeforeNext / 1000));
  return new ApiError('rate_limited', `${what}; retry in ${seconds} seconds.`, { headers: { 'Retry-After': String(seconds) } });
};

/** The identity a credential's requests are counted under, once it has authenticated. */
function callerKey(caller: Caller): string {
  switch (caller.kind) {
    case 'api_token':
    case 'scim_token':
      return `${caller.kind}:${caller.tokenId}`;
    case 'session':
      return `session:${caller.sessionId}`;
    case 'mcp_client':
      return `mcp:${caller.mcpServerId}:${caller.clientId ?? 'token'}`;
    case 'oauth_client':
      return `oauth_client:${caller.clientId}`;
  }
}

/**
 * A check of a budget: on the memory store it is done when the call returns (throwing the
 * 429 at once); on a shared store it is a promise. `await` takes either.
 */
export type Checked = void | Promise<void>;

const FAILURES = 'Too many failed authentications from this address';

/**
 * The three budgets of the request path. A credential is counted as itself only once it has
 * authenticated: until then, and for anonymous requests and requests that match no
 * operation, the client address is. Failed authentications have their own, smaller budget
 * per address, checked before the database is asked about the next credential.
 */
export class RateLimits {
  private readonly shared: { perCaller: RateLimiterAbstract; perAddress: RateLimiterAbstract; failures: RateLimiterAbstract } | null;
  private readonly memory: { perCaller: MemoryWindows; perAddress: MemoryWindows; failures: MemoryWindows } | null;
  private readonly window: string;
  private readonly addressWindow: string;
  private readonly onRefused: ((budget: RateLimitBudget) => void) | undefined;

  constructor(settings: RateLimitSettings) {
    const { store, points, durationSeconds, authFailures } = settings;
    this.onRefused = settings.onRefused;
    if (store.kind === 'memory') {
      const ms = durationSeconds * 1000;
      this.memory = { perCaller: new MemoryWindows(points, ms), perAddress: new MemoryWindows(points, ms), failures: new MemoryWindows(authFailures, ms) };
      this.shared = null;
    } else {
      this.shared = {
        perCaller: limiter(store, 'caller', points, durationSeconds),
        perAddress: limiter(store, 'address', points, durationSeconds),
        failures: limiter(store, 'auth-failures', authFailures, durationSeconds),
      };
      this.memory = null;
    }
    this.window = `More than ${points} requests in ${durationSeconds} seconds`;
    this.addressWindow = `${this.window} from this address`;
  }

  caller(caller: Caller): Checked {
    if (this.memory) return this.take(this.memory.perCaller, callerKey(caller), this.window, 'caller');
    return this.consume(this.shared!.perCaller, callerKey(caller), this.window, 'caller');
  }

  address(ip: string | undefined): Checked {
    if (this.memory) return this.take(this.memory.perAddress, ip ?? 'unknown', this.addressWindow, 'address');
    return this.consume(this.shared!.perAddress, ip ?? 'unknown', this.addressWindow, 'address');
  }

  /** Before a credential is looked up: refused when this address has used up its failures. */
  mayAuthenticate(ip: string | undefined): Checked {
    if (this.memory) {
      const wait = this.memory.failures.exhausted(ip ?? 'unknown');
      if (wait !== null) {
        this.onRefused?.('auth_failures');
        throw refusal(FAILURES, wait);
      }
      return;
    }
    return this.shared!.failures.get(ip ?? 'unknown').then((used) => {
      if (used && used.remainingPoints <= 0) {
        this.onRefused?.('auth_failures');
        throw tooMany(FAILURES, used);
      }
    });
  }

  failedAuthentication(ip: string | undefined): Checked {
    if (this.memory) return this.take(this.memory.failures, ip ?? 'unknown', FAILURES, 'auth_failures');
    return this.consume(this.shared!.failures, ip ?? 'unknown', FAILURES, 'auth_failures');
  }

  private take(windows: MemoryWindows, key: string, what: string, budget: RateLimitBudget): void {
    const wait = windows.take(key);
    if (wait === null) return;
    this.onRefused?.(budget);
    throw refusal(what, wait);
  }

  private async consume(l: RateLimiterAbstract, key: string, what: string, budget: RateLimitBudget): Promise<void> {
    try {
      await l.consume(key);
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw rejection;
      this.onRefused?.(budget);
      throw tooMany(what, rejection);
    }
  }
}
