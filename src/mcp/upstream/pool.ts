import type { Progress } from '@modelcontextprotocol/sdk/types.js';
import { callTool, describe, UpstreamUnavailable, type UpstreamCallResult, type UpstreamTarget } from './client';
import { UpstreamHttpError, UpstreamSession } from './session';
import { OutboundRefused, type OutboundLimits } from '../../outbound/client';

/**
 * Upstream MCP sessions kept open between calls, one per connection and credential: a
 * `tools/call` through the MCP endpoint then costs the upstream one request, not a whole
 * session (initialize, initialized, the call, DELETE), over a kept-alive connection. The
 * sessions are our own lean client (mcp-upstream-session.ts), not the SDK's: this is the
 * endpoint's hot path.
 *
 * - Keyed by the connection, for what is sent (URL, transport, the credential as placed:
 *   credentialVersion): a rotated API key or a refreshed OAuth token opens a new session, and
 *   the old one is closed once its calls are done. It lives in memory only.
 * - Every request still goes through the outbound guard (address checks after resolution),
 *   each with its own deadline (covering its whole answer) and size cap.
 * - Concurrent first calls share one connect. A session idle for `idleMs` is closed; past
 *   `max` sessions the least recently used is.
 * - A call is retried once in a fresh session, and only on a session that had already served
 *   one (a fresh one failing is an answer), when the upstream cannot have run it: it dropped
 *   the session (404, or 400 to a request carrying its session id), or no connection could be
 *   made. A connection reset after the request may have reached the upstream is retried only
 *   for a tool the caller says is safe to repeat (read-only or idempotent): the upstream may
 *   have run the rest, and running "send the invoice" twice is worse than a tool error.
 * - Streamable HTTP only: the old SSE transport holds a stream per session and is called
 *   one session per call, as before. `idleMs` 0 turns pooling off.
 */

/** One `tools/call` through the pool. */
export interface PooledToolCall {
  name: string;
  args: Record<string, unknown>;
  signal?: AbortSignal | undefined;
  onprogress?: ((progress: Progress) => void) | undefined;
  /**
   * Running it twice does no harm (the tool is read-only or idempotent): the call may be sent
   * again after a connection was reset before any answer came. Default false.
   */
  repeatable?: boolean;
}

export interface UpstreamPoolOptions {
  /** Close a session nobody used for this long; 0: no pooling (one session per call). */
  idleMs: number;
  /** The most sessions kept; past it the least recently used is closed. */
  max: number;
}

interface Entry {
  owner: string;
  version: string;
  session: UpstreamSession;
  /** One connect shared by every call that arrives before it is done. */
  ready: Promise<void>;
  inUse: number;
  /** Calls it completed: only a session that served one is retried when it fails. */
  served: number;
  lastUsed: number;
  retired: boolean;
}

const NOT_MCP = 'The upstream MCP server could not be reached or did not answer MCP.';

/**
 * What a session is opened for: a call whose target differs (a rotated key, a refreshed token)
 * needs a new one. Compared, never logged or sent; the session holds the credential anyway.
 */
export function credentialVersion(target: UpstreamTarget): string {
  return JSON.stringify([target.url, target.transport, target.credential]);
}

export class UpstreamPool {
  private readonly entries = new Map<string, Entry>();
  private readonly sweeper: NodeJS.Timeout | null;
  private closed = false;
  /** Sessions opened (initialize sent) since the pool started: for the benches and the log. */
  connects = 0;

  constructor(private readonly options: UpstreamPoolOptions) {
    this.sweeper = options.idleMs > 0 ? setInterval(() => this.sweep(), Math.max(50, Math.min(options.idleMs, 30_000))) : null;
    this.sweeper?.unref();
  }

  get size(): number {
    return this.entries.size;
  }

  /**
   * `tools/call` through the connection's pooled session (opened on first use). 401/403 become
   * UpstreamRejected (and the session is dropped); anything else that fails UpstreamUnavailable.
   */
  async callTool(owner: string, target: UpstreamTarget, limits: OutboundLimits, call: PooledToolCall): Promise<UpstreamCallResult> {
    const { name, args, signal, onprogress } = call;
    if (this.closed || this.options.idleMs === 0 || target.transport !== 'streamable_http') {
      return callTool(target, limits, name, args, signal, onprogress);
    }
    const work = (session: UpstreamSession) => session.callTool(name, args, limits, signal, onprogress);
    const version = credentialVersion(target);
    const entry = this.acquire(owner, version, target, limits);
    try {
      return await this.run(entry, target, work, call.repeatable === true);
    } catch (err) {
      if (!(err instanceof Retry) || signal?.aborted) throw err instanceof Retry ? err.cause : err;
      const fresh = this.acquire(owner, version, target, limits);
      try {
        return await this.run(fresh, target, work, call.repeatable === true);
      } catch (again) {
        throw again instanceof Retry ? again.cause : again;
      }
    }
  }

  /** Closes every session (app shutdown); calls after this run one session each. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.sweeper) clearInterval(this.sweeper);
    const all = [...this.entries.values()];
    this.entries.clear();
    await Promise.all(all.map((entry) => this.end(entry)));
  }

  private async run(
    entry: Entry,
    target: UpstreamTarget,
    work: (session: UpstreamSession) => Promise<UpstreamCallResult>,
    repeatable: boolean,
  ): Promise<UpstreamCallResult> {
    const servedBefore = entry.served;
    entry.inUse += 1;
    try {
      await entry.ready;
      const result = await work(entry.session);
      entry.served += 1;
      return result;
    } catch (err) {
      if (entry.session.refused) {
        const refused = entry.session.refused;
        this.retire(entry);
        throw refused;
      }
      if (err instanceof UpstreamUnavailable) throw err;
      const network = err instanceof OutboundRefused ? err.network : null;
      const dropped =
        entry.session.gone || network !== null || (err instanceof UpstreamHttpError && (err.status === 404 || err.status === 400) && entry.served > 0);
      if (dropped) this.retire(entry);
      const failure = new UpstreamUnavailable(err instanceof OutboundRefused ? err.message : NOT_MCP, describe(err, target.credential));
      // Only a session that had served a call is retried: a fresh one failing is the upstream's answer.
      if (dropped && servedBefore > 0 && (network !== 'maybe_received' || repeatable)) throw new Retry(failure);
      throw failure;
    } finally {
      entry.inUse -= 1;
      entry.lastUsed = Date.now();
      if (entry.retired && entry.inUse === 0) void this.end(entry);
    }
  }

  private acquire(owner: string, version: string, target: UpstreamTarget, limits: OutboundLimits): Entry {
    const now = Date.now();
    const found = this.entries.get(owner);
    if (found) {
      const expired = found.inUse === 0 && now - found.lastUsed >= this.options.idleMs;
      if (found.version === version && !found.retired && !expired) {
        // Most recently used last: the map's order is the eviction order.
        this.entries.delete(owner);
        this.entries.set(owner, found);
        found.lastUsed = now;
        return found;
      }
      this.retire(found);
    }
    while (this.entries.size >= this.options.max) {
      const oldest = this.entries.values().next().value as Entry | undefined;
      if (!oldest) break;
      this.retire(oldest);
    }
    const entry = this.open(owner, version, target, limits);
    this.entries.set(owner, entry);
    return entry;
  }

  private open(owner: string, version: string, target: UpstreamTarget, limits: OutboundLimits): Entry {
    const session = new UpstreamSession(target, limits);
    const entry: Entry = { owner, version, session, ready: Promise.resolve(), inUse: 0, served: 0, lastUsed: Date.now(), retired: false };
    this.connects += 1;
    entry.ready = session.open().catch((err: unknown) => {
      this.retire(entry);
      if (session.refused) throw session.refused;
      if (err instanceof UpstreamUnavailable) throw err;
      throw new UpstreamUnavailable(err instanceof OutboundRefused ? err.message : NOT_MCP, describe(err, target.credential));
    });
    // A connect nobody waits for any more must not end the process.
    entry.ready.catch(() => undefined);
    return entry;
  }

  /** Out of the pool now; closed once its last call is done. */
  private retire(entry: Entry): void {
    if (this.entries.get(entry.owner) === entry) this.entries.delete(entry.owner);
    if (entry.retired) return;
    entry.retired = true;
    if (entry.inUse === 0) void this.end(entry);
  }

  private async end(entry: Entry): Promise<void> {
    entry.retired = true;
    await entry.ready.catch(() => undefined);
    // DELETE at an upstream that keeps sessions, then its connections; failures do not matter here.
    await entry.session.close();
  }

  private sweep(): void {
    const now = Date.now();
    for (const entry of [...this.entries.values()]) {
      if (entry.inUse === 0 && now - entry.lastUsed >= this.options.idleMs) this.retire(entry);
    }
  }
}

/** A failure of a reused session that one fresh session may cure. */
class Retry extends Error {
  constructor(override readonly cause: UpstreamUnavailable) {
    super(cause.message);
  }
}
