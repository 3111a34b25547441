/**
 * A service this one depends on (the file storage, say) cannot be reached right now: the
 * request is answered 503 with `Retry-After`, the client's cue to try again, rather than a 500,
 * which says the server is broken. The database has its own test (db/unavailable.ts): its
 * errors come from the driver and are recognised, not wrapped.
 */
export class DependencyUnavailableError extends Error {
  constructor(
    /** What a person is told cannot be reached: "The file storage". */
    readonly dependency: string,
    override readonly cause: unknown,
    readonly retryAfterSeconds = 5,
  ) {
    super(`${dependency} cannot be reached right now.`);
    this.name = 'DependencyUnavailableError';
  }
}

// Node's network failures, and the AWS SDK's own names for a request that timed out.
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
]);
const UNREACHABLE_NAMES = new Set(['TimeoutError', 'RequestTimeout', 'RequestTimeoutException', 'ServiceUnavailable', 'SlowDown', 'InternalError']);

/** Whether an HTTP API's failure (a network error, a timeout, a 5xx answer) means "not now" rather than "not this". */
export function isUnreachable(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { code?: unknown; name?: unknown; $metadata?: { httpStatusCode?: number }; cause?: unknown; $cause?: unknown };
  if (typeof e.code === 'string' && UNREACHABLE_CODES.has(e.code)) return true;
  if (typeof e.name === 'string' && UNREACHABLE_NAMES.has(e.name)) return true;
  const status = e.$metadata?.httpStatusCode;
  if (typeof status === 'number' && status >= 500) return true;
  // The AWS SDK wraps a network error it gave up retrying in an error of its own: the original as
  // `$cause`, or only its text when the original is not an Error of this realm (Jest's sandbox).
  if ([e.cause, e.$cause].some((inner) => inner !== undefined && inner !== err && isUnreachable(inner))) return true;
  const message = (err as { message?: unknown }).message;
  return typeof message === 'string' && message.startsWith('AWS SDK error wrapper for ') && [...UNREACHABLE_CODES].some((code) => message.includes(code));
}
