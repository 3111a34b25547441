import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';

/** Every setting, read from the environment once and validated. README lists them. */
export interface Config {
  env: 'development' | 'production' | 'test';
  host: string;
  port: number;
  baseUrl: string;
  databaseUrl: string | null;
  dataDir: string;
  encryptionKey: Buffer;
  logLevel: string;
  bodyLimitBytes: number;
  rateLimit: { points: number; durationSeconds: number; store: 'memory' | 'postgres'; authFailures: number };
  outbound: { allowLoopback: boolean; allowPrivate: boolean; timeoutMs: number };
  smtp: { url: string | null; from: string };
  validateResponses: 'off' | 'log';
  autoBootstrap: boolean;
  shutdownGraceMs: number;
  /** How often the outbox worker looks for events to deliver; 0 turns it off in this process. */
  outboxPollMs: number;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(`${name} must be a whole number from ${min} to ${max}; got "${raw}".`);
  }
  return value;
}

function bool(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]?.toLowerCase();
  if (raw === undefined || raw === '') return fallback;
  if (['1', 'true', 'yes', 'on'].includes(raw)) return true;
  if (['0', 'false', 'no', 'off'].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false; got "${env[name]}".`);
}

function oneOf<T extends string>(env: Env, name: string, values: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(values as readonly string[]).includes(raw)) throw new ConfigError(`${name} must be one of ${values.join(', ')}; got "${raw}".`);
  return raw as T;
}

/**
 * The 32-byte key that encrypts secrets at rest. Given as ENCRYPTION_KEY (64 hex characters
 * or base64); otherwise, outside production, generated once into DATA_DIR so an embedded
 * deployment keeps working across restarts.
 */
function encryptionKey(env: Env, dataDir: string, production: boolean): Buffer {
  const raw = env.ENCRYPTION_KEY;
  if (raw) {
    const key = /^[0-9a-fA-F]{64}$/.test(raw) ? Buffer.from(raw, 'hex') : Buffer.from(raw, 'base64');
    if (key.length !== 32) throw new ConfigError('ENCRYPTION_KEY must be 32 bytes: 64 hex characters or base64.');
    return key;
  }
  if (production) throw new ConfigError('ENCRYPTION_KEY is required when NODE_ENV=production.');
  const file = join(dataDir, 'encryption.key');
  if (existsSync(file)) return encryptionKey({ ENCRYPTION_KEY: readFileSync(file, 'utf8').trim() }, dataDir, production);
  mkdirSync(dataDir, { recursive: true });
  const key = randomBytes(32);
  writeFileSync(file, `${key.toString('hex')}\n`, { mode: 0o600 });
  return key;
}

function rateLimitStore(env: Env): 'memory' | 'postgres' {
  const store = oneOf(env, 'RATE_LIMIT_STORE', ['memory', 'postgres'] as const, 'memory');
  if (store === 'postgres' && !env.DATABASE_URL) throw new ConfigError('RATE_LIMIT_STORE=postgres needs DATABASE_URL (a PostgreSQL server shared by the replicas).');
  return store;
}

export function loadConfig(env: Env = process.env): Config {
  const nodeEnv = oneOf(env, 'NODE_ENV', ['development', 'production', 'test'] as const, 'development');
  const port = int(env, 'PORT', 8080, 0, 65535);
  const host = env.HOST || '127.0.0.1';
  const baseUrl = (env.BASE_URL || `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`).replace(/\/+$/, '');
  try {
    new URL(baseUrl);
  } catch {
    throw new ConfigError(`BASE_URL must be an absolute URL; got "${baseUrl}".`);
  }
  const dataDir = resolve(env.DATA_DIR || './data');
  return {
    env: nodeEnv,
    host,
    port,
    baseUrl,
    databaseUrl: env.DATABASE_URL || null,
    dataDir,
    encryptionKey: encryptionKey(env, dataDir, nodeEnv === 'production'),
    logLevel: oneOf(env, 'LOG_LEVEL', ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const, 'info'),
    bodyLimitBytes: int(env, 'BODY_LIMIT_BYTES', 1_048_576, 1024, 104_857_600),
    rateLimit: {
      points: int(env, 'RATE_LIMIT_REQUESTS', 600, 1, 10_000_000),
      durationSeconds: int(env, 'RATE_LIMIT_WINDOW_SECONDS', 60, 1, 86_400),
      store: rateLimitStore(env),
      authFailures: int(env, 'RATE_LIMIT_AUTH_FAILURES', 60, 1, 10_000_000),
    },
    outbound: {
      allowLoopback: bool(env, 'OUTBOUND_ALLOW_LOOPBACK', false),
      allowPrivate: bool(env, 'OUTBOUND_ALLOW_PRIVATE', false),
      timeoutMs: int(env, 'OUTBOUND_TIMEOUT_MS', 10_000, 100, 120_000),
    },
    smtp: { url: env.SMTP_URL || null, from: env.SMTP_FROM || 'MCP control plane <no-reply@localhost>' },
    validateResponses: oneOf(env, 'VALIDATE_RESPONSES', ['off', 'log'] as const, nodeEnv === 'development' ? 'log' : 'off'),
    autoBootstrap: bool(env, 'AUTO_BOOTSTRAP', true),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 10_000, 0, 600_000),
    outboxPollMs: int(env, 'OUTBOX_POLL_MS', 1_000, 0, 3_600_000),
  };
}
