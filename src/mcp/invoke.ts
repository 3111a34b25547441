import type { Progress } from '@modelcontextprotocol/sdk/types.js';
import { recordError, recordUse, type ConnectionRow } from '../areas/connections';
import type { ResolvedConnector } from '../areas/connectors';
import { ApiError } from '../http/errors';
import { failed, SpanKind } from '../lib/tracing';
import { UpstreamUnavailable, type UpstreamCallResult } from './upstream/client';
import { upstreamLimits, withConnection, type ConnectionContext } from './upstream/credentials';

/**
 * The one way an upstream tool is called, whoever calls it: the MCP endpoint's tools/call, a
 * synthetic tool's steps (from the endpoint or from executeSyntheticTool). Through the
 * connection's credentials (refreshed, or the connection marked needs_reauth, by
 * withConnection), through the connection's kept upstream session (the pool, with its one
 * retry rule), with one bookkeeping rule for the connection's `last_used_at` and `last_error`.
 * The caller words the outcome for its own answer.
 */

/** A connection's `last_used_at` moves on a call only when it is older than this (or the last use failed): not a write on every call. */
const LAST_USED_PRECISION_MS = 60_000;

export interface ToolInvocation {
  /** An active connection, and its connector as the connection's owner sees it. */
  connection: ConnectionRow;
  connector: ResolvedConnector;
  /** The tool's name at the upstream, and its arguments. */
  tool: string;
  args: Record<string, unknown>;
  signal: AbortSignal;
  /** A deadline shorter than the outbound default (a synthetic step's). */
  timeoutMs?: number;
  onprogress?: (progress: Progress) => void;
  /**
   * The upstream's own hints about the tool: a read-only or idempotent tool may be sent again
   * after a connection reset before any answer came; anything else is not (running "send the
   * invoice" twice is worse than a tool error).
   */
  annotations?: { read_only_hint: boolean | null; idempotent_hint: boolean | null } | null;
  /** Names the call in the connection's `last_error` ("tools/call search", "Synthetic tool x, step y"). */
  label: string;
}

export type Invoked =
  /** The upstream answered: a result, a tool error (`isError`) included. */
  | { outcome: 'answered'; result: UpstreamCallResult }
  /** The upstream could not be reached or did not answer in time; `timedOut` when the deadline passed. */
  | { outcome: 'unavailable'; message: string; detail: string; timedOut: boolean }
  /** The connection's credentials stopped working: it is needs_reauth now (or cannot be used). */
  | { outcome: 'needs_reauth'; message: string }
  | { outcome: 'cancelled' };

export function invokeTool(ctx: ConnectionContext, call: ToolInvocation): Promise<Invoked> {
  const tracing = ctx.deps.tracing;
  if (!tracing.enabled) return invoke(ctx, call);
  // The CLIENT span of the upstream call (MCP semantic conventions): its context is the
  // traceparent the upstream receives, in the HTTP headers and in the request's _meta.
  const upstream = new URL(call.connector.mcp_url);
  const attributes = {
    'mcp.method.name': 'tools/call',
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': call.tool,
    'server.address': upstream.hostname,
    'server.port': Number(upstream.port) || (upstream.protocol === 'https:' ? 443 : 80),
    'network.transport': 'tcp',
    'network.protocol.name': 'http',
  };
  return tracing.inSpan(`tools/call ${call.tool}`, { kind: SpanKind.CLIENT, attributes }, async (span) => {
    const invoked = await invoke(ctx, call);
    if (invoked.outcome === 'answered') {
      if (invoked.result.isError) failed(span, 'tool_error');
    } else failed(span, invoked.outcome === 'unavailable' && invoked.timedOut ? 'timeout' : invoked.outcome);
    return invoked;
  });
}

async function invoke(ctx: ConnectionContext, call: ToolInvocation): Promise<Invoked> {
  const { connection: row, connector } = call;
  const limits = upstreamLimits(ctx);
  const timeoutMs = call.timeoutMs ?? limits.timeoutMs;
  const repeatable = call.annotations?.read_only_hint === true || call.annotations?.idempotent_hint === true;
  const started = Date.now();
  try {
    const result = await withConnection(ctx, row, connector, (credential) =>
      ctx.deps.mcp.upstream.callTool(
        row.id,
        { url: connector.mcp_url, transport: connector.transport, credential },
        { ...limits, timeoutMs },
        { name: call.tool, args: call.args, signal: call.signal, onprogress: call.onprogress, repeatable },
      ),
    );
    noteUse(ctx, row);
    return { outcome: 'answered', result };
  } catch (err) {
    if (call.signal.aborted) return { outcome: 'cancelled' };
    if (err instanceof UpstreamUnavailable) {
      row.last_error = `${call.label}: ${err.message}`;
      void recordError(ctx.db, row.id, row.last_error).catch(() => undefined);
      return { outcome: 'unavailable', message: err.message, detail: err.detail, timedOut: Date.now() - started >= timeoutMs - 50 };
    }
    if (err instanceof ApiError && err.code === 'connection_needs_reauth') return { outcome: 'needs_reauth', message: err.detail };
    throw err;
  }
}

/**
 * Bookkeeping kept to the minute (as an MCP server's own last_used_at). The row object follows
 * it: the endpoint keeps connection rows between calls (served-tools.ts), and these columns
 * notify nothing.
 */
function noteUse(ctx: ConnectionContext, row: ConnectionRow): void {
  const now = new Date();
  if (row.last_error === null && row.last_used_at && now.getTime() - row.last_used_at.getTime() < LAST_USED_PRECISION_MS) return;
  row.last_used_at = now;
  row.last_error = null;
  void recordUse(ctx.db, row.id, now, null).catch(() => undefined);
}
