import type { Redis } from 'ioredis';
import type pg from 'pg';
import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Caller } from '../auth/credentials';
import { ApiError } from './errors';

/** Where the counters live: this process, or a store every replica shares. */
export type CounterStore = { kind: 'memory' } | { kind: 'postgres'; pool: pg.Pool } | { kind: 'redis'; client: Redis };

export interface RateLimitSettings {
  /** Requests per window, per authenticated credential or, without one, per client address. */
  points: number;
  durationSeconds: number;
  /** Failed authentications per client address per window. */
  authFailures: number;
  store: CounterStore;
}

function limiter(store: CounterStore, keyPrefix: string, points: number, duration: number): RateLimiterAbstract {
  const memory = new RateLimiterMemory({ points, duration, keyPrefix });
  // The in-memory limiter stands in while a shared store cannot answer, so an outage of the
  // counter store does not turn into an outage of the API.
  if (store.kind === 'postgres') {
    return new RateLimiterPostgres({
      storeClient: store.pool, storeType: 'pool', tableName: 'rate_limits', tableCreated: true, clearExpiredByTimeout: true,
      keyPrefix, points, duration, insuranceLimiter: memory,
    });
  }
  if (store.kind === 'redis') return new RateLimiterRedis({ storeClient: store.client, keyPrefix, points, duration, insuranceLimiter: memory });
  return memory;
}

const tooMany = (what: string, rejection: RateLimiterRes) => {
  const seconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
  return new ApiError('rate_limited', `${what}; retry in ${seconds} seconds.`, { headers: { 'Retry-After': String(seconds) } });
};

async function consume(l: RateLimiterAbstract, key: string, what: string): Promise<void> {
  try {
    await l.consume(key);
  } catch (rejection) {
    if (rejection instanceof RateLimiterRes) throw tooMany(what, rejection);
    throw rejection;
  }
}

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
  }
}

/**
 * The three budgets of the request path. A credential is counted as itself only once it has
 * authenticated: until then, and for anonymous requests and requests that match no
 * operation, the client address is. Failed authentications have their own, smaller budget
 * per address, checked before the database is asked about the next credential.
 */
export class RateLimits {
  private readonly perCaller: RateLimiterAbstract;
  private readonly perAddress: RateLimiterAbstract;
  private readonly failures: RateLimiterAbstract;

  constructor(private readonly settings: RateLimitSettings) {
    const { store, points, durationSeconds, authFailures } = settings;
    this.perCaller = limiter(store, 'caller', points, durationSeconds);
    this.perAddress = limiter(store, 'address', points, durationSeconds);
    this.failures = limiter(store, 'auth-failures', authFailures, durationSeconds);
  }

  private get window(): string {
    return `More than ${this.settings.points} requests in ${this.settings.durationSeconds} seconds`;
  }

  caller(caller: Caller): Promise<void> {
    return consume(this.perCaller, callerKey(caller), this.window);
  }

  address(ip: string | undefined): Promise<void> {
    return consume(this.perAddress, ip ?? 'unknown', `${this.window} from this address`);
  }

  /** Before a credential is looked up: refused when this address has used up its failures. */
  async mayAuthenticate(ip: string | undefined): Promise<void> {
    const used = await this.failures.get(ip ?? 'unknown');
    if (used && used.remainingPoints <= 0) throw tooMany('Too many failed authentications from this address', used);
  }

  failedAuthentication(ip: string | undefined): Promise<void> {
    return consume(this.failures, ip ?? 'unknown', 'Too many failed authentications from this address');
  }
}
