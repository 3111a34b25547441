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

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    { level, base: { service: 'mcp-control-plane' }, redact: { paths: REDACTED_PATHS, censor: '[Redacted]' } },
    destination,
  );
}
