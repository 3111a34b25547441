import type { NextFunction, Request, Response } from 'express';
import type pg from 'pg';
import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { hashSecret } from '../lib/crypto';
import { ApiError } from './errors';
import { requestState, sendError } from './respond';

/** Paths load balancers and clients probe often; never limited. */
const EXEMPT = new Set(['/health']);

export interface RateLimitOptions {
  points: number;
  durationSeconds: number;
  /** Counters in PostgreSQL, shared by every replica; in process memory otherwise. */
  pool?: pg.Pool | null;
}

function createLimiter({ points, durationSeconds, pool }: RateLimitOptions): RateLimiterAbstract {
  const memory = new RateLimiterMemory({ points, duration: durationSeconds });
  if (!pool) return memory;
  // The in-memory limiter stands in while the database cannot answer, so an outage of the
  // counter store does not turn into an outage of the API.
  return new RateLimiterPostgres({
    storeClient: pool,
    storeType: 'pool',
    tableName: 'rate_limits',
    tableCreated: true,
    clearExpiredByTimeout: true,
    keyPrefix: 'api',
    points,
    duration: durationSeconds,
    insuranceLimiter: memory,
  });
}

/**
 * Failed authentications per client address. A different invented token on every request
 * gets a fresh per-credential bucket each time, so guessing is limited here instead.
 * Valid credentials from the same address are not affected.
 */
export function failedAuthenticationLimit(points: number, durationSeconds: number) {
  const limiter = new RateLimiterMemory({ points, duration: durationSeconds, keyPrefix: 'auth-failures' });
  return async (ip: string | undefined): Promise<void> => {
    try {
      await limiter.consume(ip ?? 'unknown');
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw rejection;
      const seconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
      throw new ApiError('rate_limited', `Too many failed authentications from this address; retry in ${seconds} seconds.`, {
        headers: { 'Retry-After': String(seconds) },
      });
    }
  };
}

/**
 * A fixed-window limit per credential (the hash of the presented token or session), or per
 * client address for anonymous requests. Needs no credential lookup.
 */
export function rateLimit(options: RateLimitOptions) {
  const { points, durationSeconds } = options;
  const limiter = createLimiter(options);
  return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
    if (EXEMPT.has(req.path)) return next();
    const { credential } = requestState(req);
    const key = credential ? `cred:${hashSecret(credential.secret)}` : `ip:${req.ip ?? 'unknown'}`;
    try {
      await limiter.consume(key);
      next();
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) return next(rejection);
      const seconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
      sendError(req, res, new ApiError('rate_limited', `More than ${points} requests in ${durationSeconds} seconds; retry in ${seconds} seconds.`, {
        headers: { 'Retry-After': String(seconds) },
      }));
    }
  };
}
