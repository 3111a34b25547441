/**
 * Whether an error means the database cannot be reached right now (a restart, a failover, a
 * connection cut by an administrator, the pool unable to connect), as opposed to a query
 * that is wrong. The first is the client's cue to retry (503 with Retry-After); the second
 * is a defect (500).
 */
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH']);
// SQLSTATE: admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections.
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300']);
const CONNECTION_MESSAGES = [
  'Connection terminated',
  'Client has encountered a connection error and is not queryable',
  'timeout exceeded when trying to connect',
  'Cannot use a pool after calling end on the pool',
];

export function isDatabaseUnavailable(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    // SQLSTATE class 08: connection exception.
    if (code.startsWith('08') && code.length === 5) return true;
    if (UNAVAILABLE_STATES.has(code) || CONNECTION_CODES.has(code)) return true;
  }
  return typeof message === 'string' && CONNECTION_MESSAGES.some((text) => message.includes(text));
}

/**
 * Whether PostgreSQL cancelled the statement (SQLSTATE 57014, query_canceled): it ran past the
 * statement timeout, or an administrator cancelled it. Nothing it began was kept (its
 * transaction is rolled back), and the same request may well pass once the database is less
 * busy: a 503 with Retry-After, not a 500.
 */
export function isStatementCancelled(err: unknown): boolean {
  return !!err && typeof err === 'object' && (err as { code?: unknown }).code === '57014';
}
