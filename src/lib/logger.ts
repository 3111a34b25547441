import pino, { type Logger } from 'pino';

/** Paths that may hold credentials or secrets anywhere in a log line. */
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
  'res.headers["set-cookie"]',
  '*.webhook_url',
  '*.token',
  '*.api_token',
  '*.password',
  '*.secret',
];

/**
 * Lines go to stdout (or `destination`). Written synchronously, as Node writes to a pipe or
 * file on Linux anyway: pino's default hands each line to the libuv thread pool, and that hop
 * cost a request more CPU than the rest of its log line (a fifth of a proxied MCP call); a
 * synchronous line is out before the next request starts, and is not lost on a crash.
 */
export function createLogger(level: string, destination: pino.DestinationStream = pino.destination({ dest: 1, sync: true })): Logger {
  return pino({ level, base: { service: 'mcp-control-plane' }, redact: { paths: REDACTED_PATHS, censor: '[Redacted]' } }, destination);
}
