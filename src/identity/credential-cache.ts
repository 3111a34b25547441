import type { Logger } from 'pino';
import type { Metrics } from '../lib/metrics';
import type { DatabaseHandle, Db } from '../db/database';
import { ChangeFollower } from '../db/notified-cache';
import { hashSecret } from '../lib/crypto';
import type { Authenticator, AuthenticationResult, Caller, OrgAccess, PresentedCredential } from './credentials';

/** What the notify triggers (migration 2026_11_24_223124_notify_credential_changes) signal on. */
export const CREDENTIALS_CHANNEL = 'cp_credentials';

/**
 * The tables whose triggers notify CREDENTIALS_CHANNEL: a write of this process that touches
 * none of them leaves the cache as it is (test/integration/written-tables.test.ts keeps the two lists equal).
 */
export const CREDENTIAL_TABLES: ReadonlySet<string> = new Set([
  'api_tokens',
  'sessions',
  'memberships',
  'roles',
  'role_assignments',
  'organizations',
  'mcp_servers',
  'oauth_access_tokens',
  'oauth_grants',
]);

// A credential's last use is written at most this often, as the authenticators do themselves.
const USE_RESOLUTION_MS = 60_000;

interface CachedCaller {
  caller: Caller;
  /** The answer itself, handed out on every hit (callers do not change it). */
  result: AuthenticationResult & { status: 'ok' };
  authenticator: Authenticator;
  cachedAt: number;
  usedAt: number;
}

export interface CredentialCacheOptions {
  maxAgeMs?: number;
  maxEntries?: number;
  /** Where hits and misses are counted (the app's metrics). */
  metrics?: Pick<Metrics, 'credentialLookup'>;
}

/**
 * What credentials may do, remembered per process so that an authenticated request costs no
 * query before its own. It is dropped whole on every change that could alter an answer: at
 * once by the process that made the change (after each write it commits that touches
 * CREDENTIAL_TABLES, or whose statements it could not read), and, through
 * PostgreSQL NOTIFY from triggers on the credential tables, within moments by every other
 * process, the operator CLI's changes included. While the listening connection is down
 * nothing is remembered. Entries also age out, and a credential's own expiry is checked on
 * every use. Only authenticators that opt in (`Authenticator.cache`: every table they read
 * notifies) are remembered, and only their successes: an unknown credential always reaches
 * the database, behind the failed-authentication limit.
 */
export class CredentialCache {
  private callers = new Map<string, CachedCaller>();
  private access = new Map<string, { access: OrgAccess | null; cachedAt: number }>();
  /**
   * Trusted only while every change is heard; its generation moves on with every clear, so a
   * lookup that started before a change and finishes after it does not put its (older)
   * answer into the cache the change just emptied.
   */
  private readonly changes = new ChangeFollower(() => {
    this.callers.clear();
    this.access.clear();
  });
  private readonly maxAgeMs: number;
  private readonly maxEntries: number;
  private readonly metrics: Pick<Metrics, 'credentialLookup'> | undefined;

  constructor(options: CredentialCacheOptions = {}) {
    this.maxAgeMs = options.maxAgeMs ?? 60_000;
    this.maxEntries = options.maxEntries ?? 50_000;
    this.metrics = options.metrics;
  }

  /** How many times it has forgotten everything (a test waits on it to know a notification arrived). */
  get clears(): number {
    return this.changes.generation;
  }

  /** Forgets everything: a change was committed (here or, as notified, anywhere). */
  clear(): void {
    this.changes.clear();
  }

  get size(): number {
    return this.callers.size + this.access.size;
  }

  private fresh(cachedAt: number, now: number): boolean {
    return this.changes.trusted && now - cachedAt < this.maxAgeMs;
  }

  private remember<V>(map: Map<string, V>, key: string, value: V, generation: number): void {
    if (!this.changes.trusted || generation !== this.changes.generation) return;
    // Oldest first: a Map iterates in insertion order.
    if (map.size >= this.maxEntries) map.delete(map.keys().next().value as string);
    map.set(key, value);
  }

  /**
   * The authenticator's answer, remembered when it may be. A remembered answer is returned as
   * it is, not as a promise: the request that finds it goes on without waiting a turn.
   */
  authenticate(authenticator: Authenticator, credential: PresentedCredential, db: Db, now = new Date()): AuthenticationResult | Promise<AuthenticationResult> {
    if (!authenticator.cache) return authenticator.authenticate(credential, db, now);
    const key = `${credential.scheme}:${hashSecret(credential.secret)}`;
    const at = now.getTime();
    const hit = this.callers.get(key);
    if (hit && hit.authenticator === authenticator && this.fresh(hit.cachedAt, at) && !expired(hit.caller, now)) {
      if (at - hit.usedAt > USE_RESOLUTION_MS) {
        hit.usedAt = at;
        authenticator.cache.recordUse(hit.caller, db, now);
      }
      this.metrics?.credentialLookup('caller', true);
      return hit.result;
    }
    this.metrics?.credentialLookup('caller', false);
    const generation = this.changes.generation;
    return authenticator.authenticate(credential, db, now).then((result) => {
      if (result.status === 'ok') this.remember(this.callers, key, { caller: result.caller, result, authenticator, cachedAt: at, usedAt: at }, generation);
      return result;
    });
  }

  /** A person's standing in an organization (sessions carry none of their own), remembered; returned as it is when remembered. */
  memberAccess(userId: string, orgId: string, load: () => Promise<OrgAccess | null>, now = Date.now()): OrgAccess | null | Promise<OrgAccess | null> {
    const key = `${userId}:${orgId}`;
    const hit = this.access.get(key);
    if (hit && this.fresh(hit.cachedAt, now)) {
      this.metrics?.credentialLookup('access', true);
      return hit.access;
    }
    this.metrics?.credentialLookup('access', false);
    const generation = this.changes.generation;
    return load().then((access) => {
      this.remember(this.access, key, { access, cachedAt: now }, generation);
      return access;
    });
  }

  /**
   * Starts trusting the cache once the database's change notifications are heard; every
   * notification (and every reconnection, after which some may have been missed) clears it.
   * Resolves with a function that stops listening.
   */
  follow(listen: DatabaseHandle['listen'], logger: Logger): Promise<() => Promise<void>> {
    return this.changes.follow(listen, CREDENTIALS_CHANNEL, logger, 'credential cache');
  }
}

function expired(caller: Caller, now: Date): boolean {
  const expiresAt = 'expiresAt' in caller ? (caller.expiresAt ?? null) : null;
  return expiresAt !== null && expiresAt <= now;
}
