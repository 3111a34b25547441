import type { NextFunction, Request, Response } from 'express';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { hashSecret } from '../lib/crypto';
import { ApiError } from './errors';
import { requestState, sendError } from './respond';

/** Paths load balancers and clients probe often; never limited. */
const EXEMPT = new Set(['/health']);

/**
 * A fixed-window limit per credential (the hash of the presented token or session), or per
 * client address for anonymous requests. Needs no database lookup, so it also stops floods
 * of invalid tokens before they reach the database.
 */
export function rateLimit(points: number, durationSeconds: number) {
  const limiter = new RateLimiterMemory({ points, duration: durationSeconds });
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
