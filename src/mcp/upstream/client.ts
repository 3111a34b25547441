import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ErrorCode, McpError, type CallToolResult, type Progress, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { OutboundRefused, OutboundSession, type OutboundLimits } from '../../outbound/client';
import { traceContextMeta } from '../../lib/tracing';

/**
 * Calls to upstream MCP servers with one member's credential, through the MCP SDK client
 * over Streamable HTTP or SSE, every request through the outbound guard (OutboundSession:
 * address checks after resolution, one deadline, one size cap for the whole exchange).
 */

/** Where a credential goes on each request, as the connector places it. */
export type UpstreamCredential =
  { kind: 'none' } | { kind: 'header'; name: string; value: string } | { kind: 'query'; name: string; value: string } | { kind: 'bearer'; token: string };

export interface UpstreamTarget {
  url: string;
  transport: 'streamable_http' | 'sse';
  credential: UpstreamCredential;
}

export interface UpstreamLimits extends OutboundLimits {
  /** The most `tools/list` pages read; an upstream that keeps giving cursors is cut off there. */
  maxPages: number;
}

export type UpstreamTool = Tool;

/** The upstream answered 401 or 403: it refuses the credential sent. */
export class UpstreamRejected extends Error {
  override readonly name = 'UpstreamRejected';
  constructor(
    readonly status: number,
    /** The upstream's challenge (RFC 9728 `resource_metadata` lives here), when it sent one. */
    readonly wwwAuthenticate: string | null,
  ) {
    super(`The upstream answered ${status}: it refuses the credentials.`);
  }
}

/** The upstream could not be reached, timed out, was refused by the guard, or did not speak MCP. */
export class UpstreamUnavailable extends Error {
  override readonly name = 'UpstreamUnavailable';
  constructor(
    /** For the customer: never an internal address or the remote's own words. */
    message: string,
    /** For the operator's log. */
    readonly detail: string,
  ) {
    super(message);
  }
}

export const CLIENT_INFO = { name: 'mcp-control-plane', version: '0.1.0' };

/** The same origin as the MCP URL: a credential never goes anywhere else (an SSE endpoint elsewhere, a redirect). */
function sameOrigin(a: URL, b: URL): boolean {
  return a.origin === b.origin;
}

/**
 * A fetch that adds the credential where the connector places it, only towards the MCP
 * server's own origin, and remembers the last refusal (401/403) the upstream answered.
 */
export function credentialFetch(session: Pick<OutboundSession, 'fetch'>, target: UpstreamTarget, seen: { refused: UpstreamRejected | null }) {
  const origin = new URL(target.url);
  const { credential } = target;
  return async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
    const headers = new Headers(init.headers);
    if (sameOrigin(url, origin)) {
      if (credential.kind === 'header') headers.set(credential.name, credential.value);
      else if (credential.kind === 'bearer') headers.set('authorization', `Bearer ${credential.token}`);
      else if (credential.kind === 'query') url.searchParams.set(credential.name, credential.value);
    }
    const response = await session.fetch(url, { ...init, headers });
    if (response.status === 401 || response.status === 403) {
      seen.refused = new UpstreamRejected(response.status, response.headers.get('www-authenticate'));
    }
    return response;
  };
}

/** What went wrong, for the operator's log, with the credential cut out wherever a message repeated it. */
export function describe(err: unknown, credential: UpstreamCredential): string {
  const text = err instanceof OutboundRefused ? err.detail : err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  const secret = credential.kind === 'bearer' ? credential.token : credential.kind === 'none' ? '' : credential.value;
  return secret.length >= 4 ? text.split(secret).join('[redacted]').split(encodeURIComponent(secret)).join('[redacted]') : text;
}

/**
 * Opens an MCP session with the upstream (`initialize`), runs `work` with the client, and
 * closes the session (ending it at the upstream when it keeps sessions). 401/403 become
 * UpstreamRejected; any other failure UpstreamUnavailable.
 */
export async function withUpstream<T>(target: UpstreamTarget, limits: UpstreamLimits, work: (client: Client) => Promise<T>, signal?: AbortSignal): Promise<T> {
  const session = new OutboundSession(limits, signal);
  const seen: { refused: UpstreamRejected | null } = { refused: null };
  const fetch = credentialFetch(session, target, seen);
  const url = new URL(target.url);
  const transport =
    target.transport === 'sse'
      ? new SSEClientTransport(url, { fetch })
      : new StreamableHTTPClientTransport(url, {
          fetch,
          reconnectionOptions: { maxReconnectionDelay: 1000, initialReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1, maxRetries: 0 },
        });
  const client = new Client(CLIENT_INFO, { capabilities: {} });
  const options = { timeout: limits.timeoutMs, signal: session.signal };
  try {
    await client.connect(transport, options);
    return await work(client);
  } catch (err) {
    if (seen.refused) throw seen.refused;
    if (err instanceof UpstreamUnavailable) throw err;
    const reason = err instanceof OutboundRefused ? err.message : 'The upstream MCP server could not be reached or did not answer MCP.';
    throw new UpstreamUnavailable(reason, describe(err, target.credential));
  } finally {
    if (transport instanceof StreamableHTTPClientTransport && transport.sessionId && !session.signal.aborted) {
      await transport.terminateSession().catch(() => undefined);
    }
    await client.close().catch(() => undefined);
    session.close();
  }
}

/**
 * A tool that answers only when called as a task (MCP `execution.taskSupport: "required"`):
 * this server does not call tools as tasks, so every call to it would fail. Such tools are
 * left out of what an upstream is taken to offer until tasks are supported.
 */
function needsTask(tool: UpstreamTool): boolean {
  return (tool as { execution?: { taskSupport?: unknown } }).execution?.taskSupport === 'required';
}

/**
 * Every tool the upstream offers that this server can call: `tools/list`, following
 * `nextCursor` up to `maxPages` pages, without the tools that must be called as tasks.
 */
export function listUpstreamTools(target: UpstreamTarget, limits: UpstreamLimits, signal?: AbortSignal): Promise<UpstreamTool[]> {
  return withUpstream(
    target,
    limits,
    async (client) => {
      const tools: UpstreamTool[] = [];
      let cursor: string | undefined;
      for (let page = 0; page < limits.maxPages; page += 1) {
        const result = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: limits.timeoutMs });
        tools.push(...result.tools.filter((tool) => !needsTask(tool)));
        cursor = result.nextCursor;
        if (!cursor) return tools;
      }
      throw new UpstreamUnavailable(
        'The upstream MCP server gave more pages of tools than this server reads.',
        `tools/list still had a cursor after ${limits.maxPages} pages`,
      );
    },
    signal,
  );
}

/** What an upstream's `tools/call` answered, passed through unchanged (content, structuredContent, isError). */
export type UpstreamCallResult = CallToolResult;

/**
 * Calls one upstream tool (`tools/call`) in a session of its own and answers its result as
 * the upstream gave it: a tool's own error is `isError: true` in the result, not a throw.
 * A JSON-RPC error the upstream answers the call with (an unknown tool, invalid arguments)
 * is an answer too: a result with `isError: true` and the error's message, as MCP clients
 * show it. 401/403 become UpstreamRejected; an unreachable upstream, a timeout (the limits'
 * deadline covers the whole exchange) or an answer that is not MCP UpstreamUnavailable.
 */
export function callTool(
  target: UpstreamTarget,
  limits: OutboundLimits,
  name: string,
  args: Record<string, unknown>,
  signal?: AbortSignal,
  /** Asks the upstream for progress (a progressToken) and hears each `notifications/progress` it sends. */
  onprogress?: (progress: Progress) => void,
): Promise<UpstreamCallResult> {
  return withUpstream(target, { ...limits, maxPages: 1 }, (client) => callWith(client, limits, name, args, signal, onprogress), signal);
}

/** `tools/call` on an open client; a JSON-RPC error the upstream answers is a result with `isError: true`. */
export async function callWith(
  client: Client,
  limits: OutboundLimits,
  name: string,
  args: Record<string, unknown>,
  signal?: AbortSignal,
  onprogress?: (progress: Progress) => void,
): Promise<UpstreamCallResult> {
  try {
    const trace = traceContextMeta();
    return (await client.callTool({ name, arguments: args, ...(trace ? { _meta: trace } : {}) }, CallToolResultSchema, {
      timeout: limits.timeoutMs,
      signal,
      ...(onprogress ? { onprogress } : {}),
    })) as UpstreamCallResult;
  } catch (err) {
    if (err instanceof McpError && err.code !== ErrorCode.RequestTimeout && err.code !== ErrorCode.ConnectionClosed) {
      return { isError: true, content: [{ type: 'text', text: `The upstream refused the call: ${err.message}` }] };
    }
    throw err;
  }
}
