import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { join, resolve } from 'node:path';
import type { StorageConfig } from './lib/storage';
import type { TracingConfig } from './lib/tracing';
import { projectRoot } from './spec';

export interface FilesConfig {
  /** The largest tool file (uploadFile, an upload request's file): 413 beyond, as the bytes arrive. */
  maxFileBytes: number;
  storage: StorageConfig;
  /** How often the sweeper expires upload requests and deletes unreferenced bytes; 0 turns it off in this process. */
  sweepIntervalMs: number;
  /** How long a reserved place may wait for its bytes before the sweeper removes it. */
  reservationTtlSeconds: number;
  /** How long bytes being stored may stay unrecorded before they count as orphaned (the longest upload). */
  orphanGraceSeconds: number;
}

/** Every setting, read from the environment once and validated. README lists them. */
export interface Config {
  env: 'development' | 'production' | 'test';
  host: string;
  port: number;
  /**
   * Where `/metrics` (Prometheus) and `/ready` are served: a port of their own, never the
   * public API's (null: not served), bound to loopback unless configured otherwise.
   */
  metrics: { port: number | null; host: string };
  /** OpenTelemetry traces sent over OTLP/HTTP; off (null endpoint) unless an endpoint is configured. */
  tracing: TracingConfig;
  baseUrl: string;
  databaseUrl: string | null;
  /**
   * Where the change listener (LISTEN/NOTIFY) connects: a session of its own, which a pooler in
   * transaction mode cannot give, so behind one this names PostgreSQL directly. Null: databaseUrl.
   */
  databaseListenUrl: string | null;
  /** Name each distinct statement so PostgreSQL plans it once per connection; off behind PgBouncer in transaction mode. */
  databasePreparedStatements: boolean;
  /** How long a query may wait for a pooled connection before it fails as the database being unavailable (503). */
  databaseConnectTimeoutMs: number;
  /** PostgreSQL's statement_timeout for the app's pool (0: none): a runaway statement is cancelled rather than holding a connection. */
  databaseStatementTimeoutMs: number;
  dataDir: string;
  /** The key that seals secrets now, and older ones that still open what they sealed. */
  encryptionKeys: { current: Buffer; older: Buffer[] };
  logLevel: string;
  bodyLimitBytes: number;
  /** Raw uploads and multipart files, which are streamed rather than parsed in memory. */
  uploadLimitBytes: number;
  /** Tool files (src/areas/files): where their bytes live, how large one may be, and the sweeper. */
  files: FilesConfig;
  rateLimit: { points: number; durationSeconds: number; store: 'memory' | 'postgres' | 'redis'; authFailures: number };
  /** Redis for shared rate-limit counters (RATE_LIMIT_STORE=redis). */
  redisUrl: string | null;
  /** Express's `trust proxy`: false, a hop count, or addresses and CIDRs of the proxies in front. */
  trustProxy: boolean | number | string[];
  outbound: { allowLoopback: boolean; allowPrivate: boolean; timeoutMs: number };
  /** Hosts a Slack destination's webhook URL may name: Slack's own, or compatible endpoints the operator lists. */
  slackWebhookHosts: readonly string[];
  /** Browser origins the MCP endpoint accepts besides the deployment's own (`Origin` otherwise gets 403). */
  mcpAllowedOrigins: readonly string[];
  smtp: { url: string | null; from: string };
  validateResponses: 'off' | 'log';
  autoBootstrap: boolean;
  /** Days the bootstrap token works: it is for setting up, not for running (0: no expiry). */
  bootstrapTokenDays: number;
  shutdownGraceMs: number;
  /** How long SIGTERM keeps serving with readiness already 503, so balancers stop routing here before new requests are refused. */
  shutdownDelayMs: number;
  /** How long an idle client connection stays open: longer than any load balancer's idle timeout in front. */
  keepAliveTimeoutMs: number;
  /** How often the outbox worker looks for events to deliver; 0 turns it off in this process. */
  outboxPollMs: number;
  /**
   * Days a tool-call record is kept in the database (0: for ever). Nothing in the API reads
   * them back: they are exported to logging destinations through the outbox, which carries
   * each record whole, so past that only the table's growth is left.
   */
  toolCallRecordRetentionDays: number;
  /**
   * How long a server may remember what a credential may do (0: never). Changes clear it
   * at once wherever they are heard; this bounds only what nothing announced.
   */
  credentialCacheSeconds: number;
  /** The least time between two test messages to one notification destination (they mail real people). */
  notificationTestCooldownSeconds: number;
  /**
   * Where Datadog logging destinations post, `{site}` standing for the destination's site:
   * Datadog's own intake, or a proxy the operator runs in front of it (the tests' receiver).
   */
  datadogIntakeUrl: string;
  /** The web app's address, where a connection's OAuth authorization sends the browser back to (its `return_to` path); null: BASE_URL. */
  webAppUrl: string | null;
  /**
   * Passkeys: the relying-party id (a domain: the web app's host, or a registrable suffix of
   * it) and the page origins whose assertions are accepted. null and empty: derived from the
   * web app's address when a request needs them (src/identity/passkeys.ts).
   */
  webauthn: { rpId: string | null; origins: readonly string[] };
  /** How long an upstream's tool list is answered from what was fetched before asking the upstream again. */
  connectionToolsTtlSeconds: number;
  /** New OAuth client registrations (RFC 7591) an organization's connections may make per hour. */
  oauthRegistrationsPerHour: number;
  /** Clients that may register at this server's /oauth/register (RFC 7591) per hour from one address. */
  mcpClientRegistrationsPerHour: number;
  /** The folder of the built-in connector catalog: one `<slug>.yml` per connector, loaded and checked at start. */
  catalogDir: string;
  /** Synthetic tool runs: the most one step's upstream call may take, and the whole run. */
  syntheticTools: { stepTimeoutMs: number; runTimeoutMs: number };
  /** Upstream MCP sessions kept open between `tools/call`s: closed after `idleMs` unused (0: one session per call), at most `max`. */
  upstreamMcp: { idleMs: number; max: number };
  /**
   * What each MCP server serves (its user toolbox resolved, the owner's restrictions, the
   * connections and connectors its tools go through), remembered between calls: how long at
   * most, and for how many servers. Every change to what it comes from clears it at once,
   * wherever it is heard (as the credential cache); 0 seconds reads it on every call.
   */
  servedTools: { cacheSeconds: number; maxServers: number };
  /**
   * Billing through Stripe: the secret key (null: no payment provider, every organization is
   * on the free plan), the API's base URL (a Stripe-compatible server in tests; null: Stripe's
   * own), and the price of each plan and interval the deployment sells (`team:month` → `price_…`).
   */
  stripe: { secretKey: string | null; apiBaseUrl: string | null; prices: Readonly<Record<string, string>> };
  /**
   * The resolver org-domain verification asks: `host:port` servers (IP addresses), or the
   * system's when empty; and how long one lookup may take in all.
   */
  dns: { servers: readonly string[]; timeoutMs: number };
  /** Social sign-in providers (SOCIAL_PROVIDERS), in the order the sign-in page shows them. */
  socialProviders: readonly SocialProvider[];
  /**
   * The key this deployment signs its SAML AuthnRequests with (one for every SSO connection:
   * identity providers pin it from the SP metadata), its certificate, and the next
   * certificate during a rotation: the metadata publishes both so that IdPs learn the next
   * one before the key switches. Unset: requests go unsigned (AuthnRequestsSigned="false").
   */
  samlSp: { privateKey: string | null; certificate: string | null; nextCertificate: string | null };
}

/** A social sign-in provider: an OpenID Connect issuer, or GitHub (OAuth 2 and its REST API), this server is a client of. */
export interface SocialProvider {
  /** Its key in URLs (`/auth/sso/<key>`) and in the accounts linked to it. */
  key: string;
  kind: 'oidc' | 'github';
  /** The button's label. */
  name: string;
  /**
   * The OpenID Connect issuer: its discovery document is at `<issuer>/.well-known/openid-configuration`.
   * GitHub's: its web address (`https://github.com`, or a GitHub Enterprise Server's).
   */
  issuer: string;
  /** GitHub's REST API (`https://api.github.com`, `https://ghe.example/api/v3`); null for OpenID Connect. */
  apiUrl: string | null;
  clientId: string;
  clientSecret: string | null;
  /** What is asked for: `openid email profile` unless configured. */
  scope: string;
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

/** A 32-byte key as 64 hex characters or base64 (or base64url) of exactly 32 bytes; nothing looser. */
function parseKey(raw: string, name: string): Buffer {
  const value = raw.trim();
  if (/^[0-9a-fA-F]{64}$/.test(value)) return Buffer.from(value, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}=?$/.test(value)) {
    const key = Buffer.from(value.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
    if (key.length === 32) return key;
  }
  throw new ConfigError(`${name} must be 32 bytes: 64 hex characters or base64 (openssl rand -hex 32 makes one).`);
}

/**
 * The keys that encrypt secrets at rest. ENCRYPTION_KEYS lists the current key first, then
 * older ones that still open what they sealed (rotation: add the new key in front, run `npm
 * run cli -- secrets reseal`, then drop the old one); ENCRYPTION_KEY is one key. Required
 * whenever the data is not the embedded default's (DATABASE_URL set, or NODE_ENV=production):
 * a key generated into DATA_DIR would differ between replicas and be lost with the folder.
 */
function encryptionKeys(env: Env, dataDir: string, required: string | null): { current: Buffer; older: Buffer[] } {
  if (env.ENCRYPTION_KEYS && env.ENCRYPTION_KEY) throw new ConfigError('Set ENCRYPTION_KEYS or ENCRYPTION_KEY, not both.');
  if (env.ENCRYPTION_KEYS) {
    const [current, ...older] = env.ENCRYPTION_KEYS.split(',').map((k, i) => parseKey(k, `ENCRYPTION_KEYS (key ${i + 1})`));
    return { current: current as Buffer, older };
  }
  if (env.ENCRYPTION_KEY) return { current: parseKey(env.ENCRYPTION_KEY, 'ENCRYPTION_KEY'), older: [] };
  if (required)
    throw new ConfigError(
      `ENCRYPTION_KEY is required ${required}. Make one once (openssl rand -hex 32), keep it with your secrets, and give the same one to every replica.`,
    );
  const file = join(dataDir, 'encryption.key');
  if (existsSync(file)) return { current: parseKey(readFileSync(file, 'utf8'), file), older: [] };
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const key = randomBytes(32);
  writeFileSync(file, `${key.toString('hex')}\n`, { mode: 0o600 });
  return { current: key, older: [] };
}

/** A comma-separated list of host names, lowercased. */
function hostList(env: Env, name: string, fallback: readonly string[]): readonly string[] {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const hosts = raw
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
  const bad = hosts.find((h) => !/^[a-z0-9.-]+$|^\[[0-9a-f:.]+\]$/.test(h));
  if (bad !== undefined || hosts.length === 0) throw new ConfigError(`${name} must be a comma-separated list of host names; got "${raw}".`);
  return hosts;
}

function originList(env: Env, name: string): readonly string[] {
  const raw = env[name];
  if (raw === undefined || raw === '') return [];
  return raw
    .split(',')
    .map((o) => o.trim())
    .filter(Boolean)
    .map((o) => {
      let origin: string;
      try {
        origin = new URL(o).origin;
      } catch {
        throw new ConfigError(`${name} must be a comma-separated list of origins (https://app.example.com); got "${raw}".`);
      }
      if (origin === 'null' || origin !== o.replace(/\/+$/, '')) throw new ConfigError(`${name} must list origins only (scheme, host, port); got "${o}".`);
      return origin;
    });
}

function rateLimitStore(env: Env): 'memory' | 'postgres' | 'redis' {
  const store = oneOf(env, 'RATE_LIMIT_STORE', ['memory', 'postgres', 'redis'] as const, env.REDIS_URL ? 'redis' : 'memory');
  if (store === 'postgres' && !env.DATABASE_URL)
    throw new ConfigError('RATE_LIMIT_STORE=postgres needs DATABASE_URL (a PostgreSQL server shared by the replicas).');
  if (store === 'redis' && !env.REDIS_URL) throw new ConfigError('RATE_LIMIT_STORE=redis needs REDIS_URL.');
  return store;
}

/**
 * Which proxies' X-Forwarded-For to believe, as Express's `trust proxy` takes it: off by
 * default (the client address is the connection's), a hop count, or the proxies' addresses.
 */
function trustProxy(env: Env): boolean | number | string[] {
  const raw = env.TRUST_PROXY?.trim();
  if (!raw || /^(false|off|no|0)$/i.test(raw)) return false;
  if (/^\d+$/.test(raw)) return Number(raw);
  const entries = raw
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean);
  const bad = entries.find((e) => !['loopback', 'linklocal', 'uniquelocal'].includes(e) && !isIP(e.split('/')[0] ?? ''));
  if (bad !== undefined) throw new ConfigError(`TRUST_PROXY must be a hop count or a comma-separated list of proxy addresses or CIDRs; got "${raw}".`);
  return entries;
}

/** STRIPE_API_BASE_URL: an absolute http(s) URL (scheme, host, port) of a Stripe-compatible API. */
function stripeApiBaseUrl(env: Env): string | null {
  const raw = env.STRIPE_API_BASE_URL?.trim();
  if (!raw) return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`STRIPE_API_BASE_URL must be an absolute URL; got "${raw}".`);
  }
  if ((url.protocol !== 'https:' && url.protocol !== 'http:') || (url.pathname !== '/' && url.pathname !== '')) {
    throw new ConfigError(`STRIPE_API_BASE_URL must be an http or https origin without a path; got "${raw}".`);
  }
  return url.origin;
}

/** DATADOG_LOGS_INTAKE_URL: an absolute http(s) URL with `{site}` in it. */
function datadogIntakeUrl(env: Env): string {
  const raw = env.DATADOG_LOGS_INTAKE_URL?.trim() || 'https://http-intake.logs.{site}/api/v2/logs';
  let valid = raw.includes('{site}');
  try {
    const url = new URL(raw.replace('{site}', 'datadoghq.com'));
    valid &&= url.protocol === 'https:' || url.protocol === 'http:';
  } catch {
    valid = false;
  }
  if (!valid) throw new ConfigError(`DATADOG_LOGS_INTAKE_URL must be an absolute http(s) URL containing {site}; got "${raw}".`);
  return raw;
}

/** STRIPE_PRICES: `plan:interval=price_id` pairs, comma-separated (`team:month=price_1,team:year=price_2`). */
function stripePrices(env: Env): Record<string, string> {
  const raw = env.STRIPE_PRICES?.trim();
  if (!raw) return {};
  const prices: Record<string, string> = {};
  for (const entry of raw
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const match = /^([a-z][a-z0-9_]{0,39}):(month|year)=([A-Za-z0-9_]+)$/.exec(entry);
    if (!match) throw new ConfigError(`STRIPE_PRICES must list plan:interval=price_id pairs (team:month=price_123); got "${entry}".`);
    prices[`${match[1]}:${match[2]}`] = match[3] as string;
  }
  return prices;
}

/** WEB_APP_URL, an absolute http(s) URL without a trailing slash; null when unset (the server's own BASE_URL then). */
function webAppUrl(env: Env): string | null {
  const raw = env.WEB_APP_URL?.trim();
  if (!raw) return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`WEB_APP_URL must be an absolute URL; got "${raw}".`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new ConfigError(`WEB_APP_URL must be an http or https URL; got "${raw}".`);
  return raw.replace(/\/+$/, '');
}

/** WEBAUTHN_RP_ID: a bare domain name (browsers refuse IP addresses, schemes and ports there). */
function rpId(env: Env): string | null {
  const raw = env.WEBAUTHN_RP_ID?.trim().toLowerCase();
  if (!raw) return null;
  if (!/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(raw) || isIP(raw) !== 0) {
    throw new ConfigError(`WEBAUTHN_RP_ID must be a domain name (example.com), without scheme or port; got "${env.WEBAUTHN_RP_ID}".`);
  }
  return raw;
}

/**
 * DNS_SERVERS: comma-separated IP addresses, each with an optional port (`10.0.0.2`,
 * `127.0.0.1:5353`, `[::1]:5353`), in the form dns.Resolver#setServers takes them.
 */
function dnsServers(env: Env): readonly string[] {
  const raw = env.DNS_SERVERS?.trim();
  if (!raw) return [];
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((server) => {
      const bracketed = /^\[([0-9a-fA-F:.]+)\](?::(\d{1,5}))?$/.exec(server);
      const plain = /^([0-9.]+)(?::(\d{1,5}))?$/.exec(server);
      const bare6 = isIP(server) === 6 ? [server, server, undefined] : null;
      const match = bracketed ?? plain ?? bare6;
      const host = match?.[1] ?? '';
      const port = match?.[2] === undefined ? null : Number(match[2]);
      if (!match || isIP(host) === 0 || (port !== null && (port < 1 || port > 65535))) {
        throw new ConfigError(`DNS_SERVERS must be a comma-separated list of IP addresses with optional ports (127.0.0.1:5353, [::1]:53); got "${server}".`);
      }
      if (port === null) return host;
      return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
    });
}

/** What is known of the well-known providers; any other key is an OpenID Connect issuer named in full. */
const KNOWN_PROVIDERS: Record<string, { name: string; issuer: (env: Env, prefix: string) => string | null }> = {
  google: { name: 'Google', issuer: () => 'https://accounts.google.com' },
  microsoft: {
    name: 'Microsoft',
    // Entra's multi-tenant endpoints (`common`, `organizations`) issue ID tokens whose `iss`
    // names the person's own tenant, never the discovered one: only a tenant's issuer checks.
    issuer: (env, prefix) => {
      const tenant = env[`${prefix}TENANT`]?.trim();
      if (!tenant) return null;
      if (['common', 'organizations', 'consumers'].includes(tenant.toLowerCase()) || !/^[A-Za-z0-9.-]{1,253}$/.test(tenant)) {
        throw new ConfigError(
          `${prefix}TENANT must be your Entra tenant's id (a GUID) or domain; got "${tenant}". The multi-tenant endpoints (common, organizations, consumers) issue tokens whose issuer cannot be checked.`,
        );
      }
      return `https://login.microsoftonline.com/${tenant}/v2.0`;
    },
  },
};

/**
 * SOCIAL_PROVIDERS lists the keys of the social sign-in providers, in the order the sign-in
 * page shows them (`google,microsoft,corp`); each key's settings are SOCIAL_<KEY>_… (the key
 * upper-cased, `-` as `_`): CLIENT_ID (required), CLIENT_SECRET, ISSUER (required but for
 * google, and for microsoft when TENANT is given), NAME, SCOPES.
 */
function socialProviders(env: Env): SocialProvider[] {
  const raw = env.SOCIAL_PROVIDERS?.trim();
  if (!raw) return [];
  const keys = raw
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean);
  const seen = new Set<string>();
  return keys.map((key) => {
    if (!/^[a-z][a-z0-9-]{0,31}$/.test(key)) throw new ConfigError(`SOCIAL_PROVIDERS must list keys of lowercase letters, digits and -; got "${key}".`);
    if (seen.has(key)) throw new ConfigError(`SOCIAL_PROVIDERS names ${key} twice.`);
    seen.add(key);
    const prefix = `SOCIAL_${key.toUpperCase().replace(/-/g, '_')}_`;
    if (key === 'github') return githubProvider(env, prefix);
    const known = KNOWN_PROVIDERS[key];
    const clientId = env[`${prefix}CLIENT_ID`]?.trim();
    if (!clientId) throw new ConfigError(`${prefix}CLIENT_ID is required for the social provider ${key} (SOCIAL_PROVIDERS).`);
    const issuerRaw = env[`${prefix}ISSUER`]?.trim() || known?.issuer(env, prefix) || null;
    if (!issuerRaw) {
      throw new ConfigError(
        key === 'microsoft'
          ? `${prefix}TENANT (your Entra tenant's id or domain) or ${prefix}ISSUER is required for the social provider microsoft.`
          : `${prefix}ISSUER (the OpenID Connect issuer, https://…) is required for the social provider ${key}.`,
      );
    }
    let issuer: URL;
    try {
      issuer = new URL(issuerRaw);
    } catch {
      throw new ConfigError(`${prefix}ISSUER must be an absolute URL; got "${issuerRaw}".`);
    }
    if (!secureOrLocal(issuer)) throw new ConfigError(`${prefix}ISSUER must be an https URL; got "${issuerRaw}".`);
    if (issuer.search !== '' || issuer.hash !== '' || issuer.username !== '')
      throw new ConfigError(`${prefix}ISSUER must have no query, fragment or user; got "${issuerRaw}".`);
    const scope = env[`${prefix}SCOPES`]?.trim() || 'openid email profile';
    if (!scope.split(/\s+/).includes('openid')) throw new ConfigError(`${prefix}SCOPES must include openid; got "${scope}".`);
    const name = env[`${prefix}NAME`]?.trim() || known?.name || key;
    if (name.length > 64) throw new ConfigError(`${prefix}NAME must be at most 64 characters.`);
    return { key, kind: 'oidc' as const, name, issuer: issuerRaw, apiUrl: null, clientId, clientSecret: env[`${prefix}CLIENT_SECRET`] || null, scope };
  });
}

/** Plain http only to this machine (a provider run for development or tests): anywhere else it would hand codes and tokens to whoever is on the path. */
function secureOrLocal(url: URL): boolean {
  return url.protocol === 'https:' || (url.protocol === 'http:' && ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname));
}

/**
 * GitHub speaks OAuth 2 without OpenID Connect: who signed in comes from its REST API.
 * SOCIAL_GITHUB_URL and SOCIAL_GITHUB_API_URL name a GitHub Enterprise Server instead of
 * github.com.
 */
function githubProvider(env: Env, prefix: string): SocialProvider {
  const origin = (name: string, raw: string): string => {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new ConfigError(`${name} must be an absolute URL; got "${raw}".`);
    }
    if (!secureOrLocal(url)) throw new ConfigError(`${name} must be an https URL; got "${raw}".`);
    if (url.search !== '' || url.hash !== '' || url.username !== '') throw new ConfigError(`${name} must have no query, fragment or user; got "${raw}".`);
    return url.href.replace(/\/+$/, '');
  };
  const clientId = env[`${prefix}CLIENT_ID`]?.trim();
  const clientSecret = env[`${prefix}CLIENT_SECRET`]?.trim();
  if (!clientId || !clientSecret)
    throw new ConfigError(`${prefix}CLIENT_ID and ${prefix}CLIENT_SECRET (a GitHub OAuth app's) are required for the social provider github.`);
  const web = origin(`${prefix}URL`, env[`${prefix}URL`]?.trim() || 'https://github.com');
  const api = origin(`${prefix}API_URL`, env[`${prefix}API_URL`]?.trim() || (web === 'https://github.com' ? 'https://api.github.com' : `${web}/api/v3`));
  const name = env[`${prefix}NAME`]?.trim() || 'GitHub';
  if (name.length > 64) throw new ConfigError(`${prefix}NAME must be at most 64 characters.`);
  return {
    key: 'github',
    kind: 'github',
    name,
    issuer: web,
    apiUrl: api,
    clientId,
    clientSecret,
    scope: env[`${prefix}SCOPES`]?.trim() || 'read:user user:email',
  };
}

function storageConfig(env: Env): StorageConfig {
  const backend = oneOf(env, 'STORAGE_BACKEND', ['disk', 's3'] as const, 'disk');
  if (backend === 'disk') return { backend };
  const bucket = env.S3_BUCKET?.trim();
  if (!bucket) throw new ConfigError('S3_BUCKET is required with STORAGE_BACKEND=s3.');
  let endpoint: string | null = null;
  if (env.S3_ENDPOINT?.trim()) {
    let url: URL;
    try {
      url = new URL(env.S3_ENDPOINT.trim());
    } catch {
      throw new ConfigError(`S3_ENDPOINT must be an absolute URL; got "${env.S3_ENDPOINT}".`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new ConfigError(`S3_ENDPOINT must be an http or https URL; got "${env.S3_ENDPOINT}".`);
    endpoint = url.href.replace(/\/+$/, '');
  }
  const accessKeyId = env.S3_ACCESS_KEY_ID?.trim();
  const secretAccessKey = env.S3_SECRET_ACCESS_KEY?.trim();
  if (!!accessKeyId !== !!secretAccessKey) throw new ConfigError('S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY go together.');
  const prefix = (env.S3_PREFIX ?? '').trim().replace(/^\/+|\/+$/g, '');
  if (prefix !== '' && (!/^[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+)*$/.test(prefix) || prefix.split('/').some((segment) => segment === '.' || segment === '..')))
    throw new ConfigError(`S3_PREFIX must be a path of plain segments; got "${env.S3_PREFIX}".`);
  return {
    backend,
    bucket,
    endpoint,
    region: env.S3_REGION?.trim() || 'us-east-1',
    credentials: accessKeyId && secretAccessKey ? { accessKeyId, secretAccessKey } : null,
    forcePathStyle: bool(env, 'S3_FORCE_PATH_STYLE', endpoint !== null),
    prefix,
  };
}

function filesConfig(env: Env): FilesConfig {
  return {
    maxFileBytes: int(env, 'FILE_MAX_BYTES', 26_214_400, 1, 10_737_418_240),
    storage: storageConfig(env),
    sweepIntervalMs: int(env, 'FILE_SWEEP_INTERVAL_MS', 60_000, 0, 86_400_000),
    reservationTtlSeconds: int(env, 'FILE_RESERVATION_TTL_SECONDS', 86_400, 60, 30 * 86_400),
    orphanGraceSeconds: int(env, 'FILE_ORPHAN_GRACE_SECONDS', 21_600, 60, 7 * 86_400),
  };
}

/** METRICS_PORT (unset: no metrics server) and METRICS_HOST; the API's own port is refused, as it would expose them publicly. */
function metricsListener(env: Env, apiPort: number): Config['metrics'] {
  const host = env.METRICS_HOST || '127.0.0.1';
  if (env.METRICS_PORT === undefined || env.METRICS_PORT === '') return { port: null, host };
  const port = int(env, 'METRICS_PORT', 0, 0, 65535);
  if (port !== 0 && port === apiPort) throw new ConfigError(`METRICS_PORT must differ from PORT (${apiPort}): metrics are not served on the public API port.`);
  return { port, host };
}

const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;

/**
 * The OpenTelemetry SDK's own variable names, as operators set them for every service: traces
 * go to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or to OTEL_EXPORTER_OTLP_ENDPOINT with
 * `/v1/traces` appended; neither set, tracing is off.
 */
function tracingConfig(env: Env): TracingConfig {
  const url = (name: string, raw: string) => {
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      throw new ConfigError(`${name} must be an absolute http(s) URL; got "${raw}".`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new ConfigError(`${name} must be an http or https URL; got "${raw}".`);
    return parsed;
  };
  const tracesEndpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const baseEndpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  let endpoint: string | null = null;
  if (tracesEndpoint) endpoint = url('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', tracesEndpoint).href;
  else if (baseEndpoint) endpoint = `${url('OTEL_EXPORTER_OTLP_ENDPOINT', baseEndpoint).href.replace(/\/+$/, '')}/v1/traces`;
  // The exporter sends OTLP/HTTP with JSON bodies; collectors take JSON and protobuf on the same path, gRPC is another port and protocol.
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL?.trim() || env.OTEL_EXPORTER_OTLP_PROTOCOL?.trim();
  if (protocol && protocol !== 'http/json' && protocol !== 'http/protobuf') {
    throw new ConfigError(`OTEL_EXPORTER_OTLP_PROTOCOL must be http/json or http/protobuf (traces are sent over OTLP/HTTP as JSON); got "${protocol}".`);
  }
  const sampler = oneOf(env, 'OTEL_TRACES_SAMPLER', SAMPLERS, 'parentbased_always_on');
  let ratio = 1;
  const rawRatio = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  if (rawRatio && sampler.endsWith('traceidratio')) {
    ratio = Number(rawRatio);
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw new ConfigError(`OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1; got "${rawRatio}".`);
  }
  return {
    endpoint,
    headers: { ...otlpHeaders(env, 'OTEL_EXPORTER_OTLP_HEADERS'), ...otlpHeaders(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS') },
    serviceName: env.OTEL_SERVICE_NAME?.trim() || 'mcp-control-plane',
    sampler,
    ratio,
    scheduleDelayMs: int(env, 'OTEL_BSP_SCHEDULE_DELAY', 5_000, 1, 600_000),
  };
}

/** `name=value` pairs separated by commas, values percent-encoded (the W3C Baggage form the OpenTelemetry SDKs read). */
function otlpHeaders(env: Env, name: string): Record<string, string> {
  const raw = env[name]?.trim();
  if (!raw) return {};
  const headers: Record<string, string> = {};
  for (const pair of raw.split(',')) {
    const eq = pair.indexOf('=');
    const key = eq < 0 ? '' : pair.slice(0, eq).trim();
    let value: string;
    try {
      value = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      value = '';
    }
    // The value may be an API key: the message names the header, never its value.
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(key) || value === '' || /[\r\n]/.test(value)) {
      throw new ConfigError(`${name} must be comma-separated name=value pairs (api-key=abc%20def); the pair${key ? ` for ${key}` : ''} is not.`);
    }
    headers[key.toLowerCase()] = value;
  }
  return headers;
}

export function loadConfig(env: Env = process.env): Config {
  const nodeEnv = oneOf(env, 'NODE_ENV', ['development', 'production', 'test'] as const, 'development');
  const port = int(env, 'PORT', 8080, 0, 65535);
  const host = env.HOST || '127.0.0.1';
  const baseUrl = (env.BASE_URL || `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`).replace(/\/+$/, '');
  let base: URL;
  try {
    base = new URL(baseUrl);
  } catch {
    throw new ConfigError(`BASE_URL must be an absolute URL; got "${baseUrl}".`);
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new ConfigError(`BASE_URL must be an http or https URL; got "${baseUrl}".`);
  // RFC 8414 and RFC 9728 put the discovery documents at the host's root
  // (/.well-known/oauth-protected-resource/mcp/…), outside any path prefix the app would be
  // served under: MCP clients would look for them where this server is not.
  if (base.pathname !== '/' || base.search !== '' || base.hash !== '' || base.username !== '' || base.password !== '') {
    throw new ConfigError(
      `BASE_URL must be an origin (scheme, host and port) without a path; got "${baseUrl}". MCP clients look for the OAuth discovery documents at the host's root (/.well-known/…, RFC 8414 and RFC 9728), so serve the API at the root of its own host name (https://mcp.example.com) rather than under a path (https://example.com/api).`,
    );
  }
  const dataDir = resolve(env.DATA_DIR || './data');
  return {
    env: nodeEnv,
    host,
    port,
    metrics: metricsListener(env, port),
    tracing: tracingConfig(env),
    baseUrl,
    databaseUrl: env.DATABASE_URL || null,
    databaseListenUrl: env.DATABASE_LISTEN_URL || null,
    databasePreparedStatements: bool(env, 'DATABASE_PREPARED_STATEMENTS', true),
    databaseConnectTimeoutMs: int(env, 'DATABASE_CONNECT_TIMEOUT_MS', 5_000, 100, 120_000),
    databaseStatementTimeoutMs: int(env, 'DATABASE_STATEMENT_TIMEOUT_MS', 30_000, 0, 3_600_000),
    dataDir,
    encryptionKeys: encryptionKeys(env, dataDir, nodeEnv === 'production' ? 'when NODE_ENV=production' : env.DATABASE_URL ? 'with DATABASE_URL' : null),
    logLevel: oneOf(env, 'LOG_LEVEL', ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const, 'info'),
    bodyLimitBytes: int(env, 'BODY_LIMIT_BYTES', 1_048_576, 1024, 104_857_600),
    uploadLimitBytes: int(env, 'UPLOAD_LIMIT_BYTES', 52_428_800, 1024, 10_737_418_240),
    files: filesConfig(env),
    rateLimit: {
      points: int(env, 'RATE_LIMIT_REQUESTS', 600, 1, 10_000_000),
      durationSeconds: int(env, 'RATE_LIMIT_WINDOW_SECONDS', 60, 1, 86_400),
      store: rateLimitStore(env),
      authFailures: int(env, 'RATE_LIMIT_AUTH_FAILURES', 60, 1, 10_000_000),
    },
    redisUrl: env.REDIS_URL || null,
    trustProxy: trustProxy(env),
    outbound: {
      allowLoopback: bool(env, 'OUTBOUND_ALLOW_LOOPBACK', false),
      allowPrivate: bool(env, 'OUTBOUND_ALLOW_PRIVATE', false),
      timeoutMs: int(env, 'OUTBOUND_TIMEOUT_MS', 10_000, 100, 120_000),
    },
    slackWebhookHosts: hostList(env, 'SLACK_WEBHOOK_HOSTS', ['hooks.slack.com']),
    mcpAllowedOrigins: originList(env, 'MCP_ALLOWED_ORIGINS'),
    smtp: { url: env.SMTP_URL || null, from: env.SMTP_FROM || 'MCP control plane <no-reply@localhost>' },
    validateResponses: oneOf(env, 'VALIDATE_RESPONSES', ['off', 'log'] as const, nodeEnv === 'development' ? 'log' : 'off'),
    // A production database is set up on purpose (the CLI's bootstrap), not by whichever replica starts first.
    autoBootstrap: bool(env, 'AUTO_BOOTSTRAP', nodeEnv !== 'production'),
    bootstrapTokenDays: int(env, 'BOOTSTRAP_TOKEN_DAYS', 7, 0, 3650),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 10_000, 0, 600_000),
    // Without readiness (no METRICS_PORT) no balancer can be told first: refusing at once is all there is.
    shutdownDelayMs: int(env, 'SHUTDOWN_DELAY_MS', env.METRICS_PORT ? 5_000 : 0, 0, 600_000),
    keepAliveTimeoutMs: int(env, 'KEEP_ALIVE_TIMEOUT_MS', 65_000, 1_000, 600_000),
    outboxPollMs: int(env, 'OUTBOX_POLL_MS', 1_000, 0, 3_600_000),
    toolCallRecordRetentionDays: int(env, 'TOOL_CALL_RECORD_RETENTION_DAYS', 90, 0, 36_500),
    credentialCacheSeconds: int(env, 'CREDENTIAL_CACHE_SECONDS', 60, 0, 3_600),
    notificationTestCooldownSeconds: int(env, 'NOTIFICATION_TEST_COOLDOWN_SECONDS', 10, 0, 86_400),
    datadogIntakeUrl: datadogIntakeUrl(env),
    webAppUrl: webAppUrl(env),
    webauthn: { rpId: rpId(env), origins: originList(env, 'WEBAUTHN_ORIGINS') },
    connectionToolsTtlSeconds: int(env, 'CONNECTION_TOOLS_TTL_SECONDS', 300, 0, 86_400),
    oauthRegistrationsPerHour: int(env, 'OAUTH_REGISTRATIONS_PER_HOUR', 20, 1, 1_000_000),
    mcpClientRegistrationsPerHour: int(env, 'MCP_CLIENT_REGISTRATIONS_PER_HOUR', 30, 1, 1_000_000),
    catalogDir: resolve(env.CATALOG_DIR || join(projectRoot, 'src', 'areas', 'connectors', 'catalog')),
    syntheticTools: {
      stepTimeoutMs: int(env, 'SYNTHETIC_STEP_TIMEOUT_MS', 30_000, 100, 600_000),
      runTimeoutMs: int(env, 'SYNTHETIC_RUN_TIMEOUT_MS', 120_000, 100, 3_600_000),
    },
    upstreamMcp: {
      idleMs: int(env, 'UPSTREAM_MCP_IDLE_MS', 60_000, 0, 3_600_000),
      max: int(env, 'UPSTREAM_MCP_POOL_MAX', 1_000, 1, 100_000),
    },
    servedTools: {
      cacheSeconds: int(env, 'MCP_SERVED_TOOLS_CACHE_SECONDS', 60, 0, 3_600),
      maxServers: int(env, 'MCP_SERVED_TOOLS_CACHE_MAX', 1_000, 1, 1_000_000),
    },
    stripe: { secretKey: env.STRIPE_SECRET_KEY?.trim() || null, apiBaseUrl: stripeApiBaseUrl(env), prices: stripePrices(env) },
    dns: { servers: dnsServers(env), timeoutMs: int(env, 'DNS_TIMEOUT_MS', 5_000, 100, 60_000) },
    socialProviders: socialProviders(env),
    samlSp: samlSp(env),
  };
}

/** SAML_SP_PRIVATE_KEY, SAML_SP_CERTIFICATE, SAML_SP_NEXT_CERTIFICATE: PEM, `\\n` accepted for newlines; key and certificate together or neither. */
function samlSp(env: Env): Config['samlSp'] {
  const pem = (name: string) => env[name]?.trim().replace(/\\n/g, '\n') || null;
  const privateKey = pem('SAML_SP_PRIVATE_KEY');
  const certificate = pem('SAML_SP_CERTIFICATE');
  if ((privateKey === null) !== (certificate === null)) throw new ConfigError('SAML_SP_PRIVATE_KEY and SAML_SP_CERTIFICATE are set together, or neither.');
  return { privateKey, certificate, nextCertificate: pem('SAML_SP_NEXT_CERTIFICATE') };
}
