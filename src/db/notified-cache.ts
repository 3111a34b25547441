import type { Logger } from 'pino';
import type { DatabaseHandle } from './database';

export interface NotifiedCacheOptions {
  /** How long a value is remembered at most, changes or not. */
  maxAgeMs: number;
  /** The most values kept; past it the oldest is forgotten. */
  maxEntries: number;
}

interface Entry<V> {
  value: V;
  expiresAt: number;
  /** What a notification names to forget it (an organization id); '' only when everything is forgotten. */
  scope: string;
}

/**
 * Whether what a process remembers of some tables can be trusted, for the caches that follow
 * their change notifications: trusted once the channel is heard, not while the listening
 * connection is down; every notification (and every reconnection, after which some may have
 * been missed) clears, and each clear moves the generation on, so that a read started before
 * a change is not remembered after it.
 */
export class ChangeFollower {
  trusted = false;
  generation = 0;

  /** `forget(scope)`: '' means everything; otherwise what the notification's payload names (an organization). */
  constructor(private readonly forget: (scope: string) => void) {}

  clear(scope = ''): void {
    this.generation += 1;
    this.forget(scope);
  }

  /** Listens on `channel`; resolves with a function that stops (and forgets). */
  async follow(listen: DatabaseHandle['listen'], channel: string, logger: Logger, what: string): Promise<() => Promise<void>> {
    let lost = false;
    const stop = await listen(
      channel,
      (payload) => {
        this.clear(payload);
        if (lost && payload === '') logger.info(`${what}: the change listener is back; remembering again`);
        if (payload === '') lost = false;
        this.trusted = true;
      },
      () => {
        this.trusted = false;
        this.clear();
        if (!lost) logger.warn(`${what}: the change listener was lost; every request asks the database until it is back`);
        lost = true;
      },
    );
    return async () => {
      this.trusted = false;
      this.clear();
      await stop();
    };
  }
}

/**
 * Values read from the database, remembered per process for as long as every change that
 * could alter them is heard of: triggers on the tables they come from notify a channel when a
 * change commits, whichever process made it, and each notification forgets what its payload
 * names (the values of one organization; an empty payload: everything); a commit of this
 * process forgets what its organization's values were at once (`clear(scope)`, from
 * AppDeps.afterCommit), so a change is never one request late here. While the listening
 * connection is down nothing is remembered. A value read before a change and answered after
 * it is not remembered (the generation moved on). Entries also age out after `maxAgeMs`, or
 * earlier at a time of their own (`until`).
 */
export class NotifiedCache<V> {
  private readonly entries = new Map<string, Entry<V>>();
  /** Loads under way, shared by the requests that arrive before one is done. */
  private readonly loading = new Map<string, Promise<V>>();
  private readonly changes = new ChangeFollower((scope) => {
    // Loads under way are dropped whatever the scope: cheap, and they are not remembered anyway (the generation moved).
    this.loading.clear();
    if (scope === '') {
      this.entries.clear();
      return;
    }
    for (const [key, entry] of this.entries) if (entry.scope === scope) this.entries.delete(key);
  });

  constructor(private readonly options: NotifiedCacheOptions) {}

  /** How many times it has forgotten everything (tests wait on it to know a notification arrived). */
  get clears(): number {
    return this.changes.generation;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Forgets everything, or what `scope` names: a change was committed (here or, as notified, anywhere). */
  clear(scope = ''): void {
    this.changes.clear(scope);
  }

  /**
   * The value remembered for `key`, returned as it is (not as a promise) so the request that
   * finds it goes on without waiting a turn; else what `load` answers, remembered when it may
   * be, until `until` (epoch ms) when the value itself knows it turns stale then.
   */
  get(key: string, load: () => Promise<{ value: V; until?: number; scope: string }>, now = Date.now()): V | Promise<V> {
    const hit = this.entries.get(key);
    if (hit) {
      if (hit.expiresAt > now) return hit.value;
      this.entries.delete(key);
    }
    const pending = this.loading.get(key);
    if (pending) return pending;
    const { changes } = this;
    const generation = changes.generation;
    const loaded = load().then(
      ({ value, until, scope }) => {
        if (this.loading.get(key) === loaded) this.loading.delete(key);
        if (changes.trusted && generation === changes.generation && this.options.maxAgeMs > 0) {
          if (this.entries.size >= this.options.maxEntries) this.entries.delete(this.entries.keys().next().value as string);
          this.entries.set(key, { value, expiresAt: Math.min(now + this.options.maxAgeMs, until ?? Infinity), scope });
        }
        return value;
      },
      (err: unknown) => {
        if (this.loading.get(key) === loaded) this.loading.delete(key);
        throw err;
      },
    );
    // Shared only while nothing changed: a load started before a change is not handed to later requests.
    if (changes.trusted) this.loading.set(key, loaded);
    return loaded;
  }

  /** Starts trusting the cache once `channel`'s notifications are heard (ChangeFollower). */
  follow(listen: DatabaseHandle['listen'], channel: string, logger: Logger, what: string): Promise<() => Promise<void>> {
    return this.changes.follow(listen, channel, logger, what);
  }
}
