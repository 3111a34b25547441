// The mixed load of the scale scenarios, through the balancer (or any base URL): API reads
// (GET /user/me), list pages (GET /role), writes (POST /role, and DELETE of a role created
// earlier) with the bootstrap token, and MCP `tools/call` (echo) with the MCP server's token.
//
// Every request's outcome and latency is kept; every acknowledged write (201 with its id, 204)
// too, so that a scenario can check afterwards that none was lost. Idempotent calls (GET, PUT,
// DELETE) are retried, up to three attempts, when the connection fails or the balancer answers
// 502/503/504 (what a killed replica looks like from behind HAProxy); POST and tools/call are
// not retried, their outcome is then unknown to the client and counted as `cut`.
//
// Bounded: `durationMs` and `maxRequests`, whichever comes first.
import { randomBytes } from 'node:crypto';
import type { Cluster } from './cluster';

export type Kind = 'read' | 'list' | 'create' | 'delete' | 'mcp';

export interface Outcome {
  kind: Kind;
  /** The final status; null when no attempt got an answer. */
  status: number | null;
  ok: boolean;
  /** A POST or tools/call whose connection broke (or got a gateway error): unknown outcome. */
  cut: boolean;
  /** Attempts made (1 unless retried). */
  attempts: number;
  /** Whether any attempt failed on the connection or with a gateway error (502/503/504). */
  sawCut: boolean;
  error?: string;
  startedAt: number;
  ms: number;
}

export interface AckedWrite {
  kind: 'created' | 'deleted';
  roleId: string;
  name: string;
  at: number;
}

export interface LoadOptions {
  durationMs: number;
  maxRequests?: number;
  concurrency?: number;
  /** Relative weights of the kinds (default read 40, list 15, create 15, delete 5, mcp 25). */
  mix?: Partial<Record<Kind, number>>;
  /** Where to send (default the balancer). */
  baseUrl?: string;
}

export interface KindSummary {
  count: number;
  errors: number;
  cut: number;
  retried: number;
  p50: number;
  p99: number;
}

export interface LoadResult {
  outcomes: Outcome[];
  writes: AckedWrite[];
  seconds: number;
  perKind: Partial<Record<Kind, KindSummary>>;
  rate: number;
  errors: number;
  cut: number;
  retried: number;
}

const DEFAULT_MIX: Record<Kind, number> = { read: 40, list: 15, create: 15, delete: 5, mcp: 25 };
const REQUEST_TIMEOUT_MS = 30_000;
const GATEWAY = new Set([502, 503, 504]);

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

export class Load {
  /** What the names of the roles this load creates start with. */
  readonly prefix = `scale-${randomBytes(3).toString('hex')}-`;
  private counter = 0;
  /** Roles created and not yet picked for deletion, across runs of this load. */
  private readonly live: string[] = [];

  constructor(private readonly cluster: Cluster) {}

  /** The mixed load for `durationMs` (or `maxRequests`), with `concurrency` requests in flight. */
  async run(options: LoadOptions): Promise<LoadResult> {
    const mix = { ...DEFAULT_MIX, ...options.mix };
    const total = Object.values(mix).reduce((a, b) => a + b, 0);
    const pick = (): Kind => {
      let x = Math.random() * total;
      for (const [kind, weight] of Object.entries(mix) as [Kind, number][]) {
        x -= weight;
        if (x < 0) return kind;
      }
      return 'read';
    };
    const outcomes: Outcome[] = [];
    const writes: AckedWrite[] = [];
    const base = options.baseUrl ?? this.cluster.lbUrl;
    const maxRequests = options.maxRequests ?? 1_000_000;
    const start = Date.now();
    const end = start + options.durationMs;
    let sent = 0;
    await Promise.all(
      Array.from({ length: options.concurrency ?? 8 }, async () => {
        while (Date.now() < end && sent < maxRequests) {
          sent += 1;
          let kind = pick();
          if (kind === 'delete' && this.live.length === 0) kind = 'create';
          outcomes.push(await this.one(base, kind, writes));
        }
      }),
    );
    return summarize(outcomes, writes, (Date.now() - start) / 1000);
  }

  /** One request of `kind`, with the retry policy; acknowledged writes go to `writes`. */
  async one(base: string, kind: Kind, writes: AckedWrite[] = []): Promise<Outcome> {
    const { seed, headers } = this.cluster;
    const startedAt = Date.now();
    const t0 = performance.now();
    let request: { method: string; path: string; body?: unknown; headers: Record<string, string>; expect: number[] };
    let name = '';
    let roleId = '';
    switch (kind) {
      case 'read':
        request = { method: 'GET', path: '/user/me', headers, expect: [200] };
        break;
      case 'list':
        request = { method: 'GET', path: '/role?limit=20', headers, expect: [200] };
        break;
      case 'create':
        name = `${this.prefix}${(this.counter += 1)}`;
        request = { method: 'POST', path: '/role', headers, body: { name, permissions: ['connector:view'] }, expect: [201] };
        break;
      case 'delete':
        roleId = this.live.splice(Math.floor(Math.random() * this.live.length), 1)[0]!;
        request = { method: 'DELETE', path: `/role/${roleId}`, headers, expect: [204] };
        break;
      case 'mcp':
        request = {
          method: 'POST',
          path: `/mcp/${seed.mcpServerId}`,
          headers: mcpHeaders(seed.mcpToken),
          body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: seed.echoTool, arguments: { text: 'scale' } } },
          expect: [200],
        };
        break;
    }
    const idempotent = ['GET', 'PUT', 'DELETE'].includes(request.method);
    let attempts = 0;
    let sawCut = false;
    let status: number | null;
    let error: string | undefined;
    let text = '';
    for (;;) {
      attempts += 1;
      error = undefined;
      try {
        const res = await fetch(`${base}${request.path}`, {
          method: request.method,
          headers: request.headers,
          body: request.body === undefined ? undefined : JSON.stringify(request.body),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        status = res.status;
        text = await res.text();
        if (!GATEWAY.has(status)) break;
        error = `gateway ${status}`;
      } catch (err) {
        status = null;
        error = err instanceof Error ? `${err.message}${err.cause instanceof Error ? `: ${err.cause.message}` : ''}` : String(err);
      }
      sawCut = true;
      if (!idempotent || attempts >= 3) break;
      await new Promise((r) => setTimeout(r, 50 * attempts));
    }
    let ok = status !== null && request.expect.includes(status);
    // A retried DELETE whose first attempt was applied before its answer was lost.
    if (!ok && kind === 'delete' && status === 404 && attempts > 1) ok = true;
    if (ok && kind === 'mcp' && (!text.includes('"result"') || text.includes('"isError":true'))) {
      ok = false;
      error = `tools/call: ${text.slice(0, 200)}`;
    }
    if (!ok && error === undefined) error = `HTTP ${status}: ${text.slice(0, 200)}`;
    if (ok && kind === 'create') {
      const id = (JSON.parse(text) as { id: string }).id;
      this.live.push(id);
      writes.push({ kind: 'created', roleId: id, name, at: Date.now() });
    }
    if (ok && kind === 'delete') writes.push({ kind: 'deleted', roleId, name: '', at: Date.now() });
    // A delete that failed for good leaves the role as it was, maybe deleted: not tried again.
    return { kind, status, ok, cut: !ok && sawCut && !idempotent, attempts, sawCut, error, startedAt, ms: performance.now() - t0 };
  }
}

export function summarize(outcomes: Outcome[], writes: AckedWrite[], seconds: number): LoadResult {
  const perKind: Partial<Record<Kind, KindSummary>> = {};
  for (const kind of Object.keys(DEFAULT_MIX) as Kind[]) {
    const mine = outcomes.filter((o) => o.kind === kind);
    if (mine.length === 0) continue;
    const times = mine.map((o) => o.ms).sort((a, b) => a - b);
    perKind[kind] = {
      count: mine.length,
      errors: mine.filter((o) => !o.ok && !o.cut).length,
      cut: mine.filter((o) => o.cut).length,
      retried: mine.filter((o) => o.attempts > 1).length,
      p50: percentile(times, 50),
      p99: percentile(times, 99),
    };
  }
  return {
    outcomes,
    writes,
    seconds,
    perKind,
    rate: outcomes.length / seconds,
    errors: outcomes.filter((o) => !o.ok && !o.cut).length,
    cut: outcomes.filter((o) => o.cut).length,
    retried: outcomes.filter((o) => o.attempts > 1).length,
  };
}

/** `read 1234 p50 3.1 p99 12.0 ms` for each kind. */
export function latencyFigures(result: LoadResult): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [kind, s] of Object.entries(result.perKind)) out[kind] = `${s.count} p50 ${s.p50.toFixed(1)} p99 ${s.p99.toFixed(1)} ms`;
  return out;
}

/** Lines naming the first few failures, for a scenario's notes. */
export function failureNotes(result: LoadResult, limit = 5): string[] {
  return result.outcomes
    .filter((o) => !o.ok)
    .slice(0, limit)
    .map((o) => `${o.kind} ${o.cut ? 'cut' : 'failed'} after ${o.attempts} attempt(s): ${o.error ?? ''}`);
}

/** What an MCP client sends with each JSON-RPC POST to an MCP server's endpoint. */
export function mcpHeaders(token: string): Record<string, string> {
  return {
    authorization: `Bearer ${token}`,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2025-06-18',
  };
}

/** One JSON-RPC message POSTed to the MCP server `serverId` at `base` (the balancer or a replica). */
export function postMcp(base: string, serverId: string, token: string, message: unknown, timeoutMs: number): Promise<Response> {
  return fetch(`${base}/mcp/${serverId}`, {
    method: 'POST',
    headers: mcpHeaders(token),
    body: JSON.stringify(message),
    signal: AbortSignal.timeout(timeoutMs),
  });
}
