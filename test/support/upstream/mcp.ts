/**
 * The MCP side shared by the loopback upstream peers: a low-level SDK `Server` offering
 * `whoami`, `echo` and any extra tools (with `tools/list` paginated at a page size the test
 * sets), served over Streamable HTTP (stateless: one server and transport per request, POST
 * /mcp) and over the old SSE transport (GET /sse + POST /messages?sessionId=…).
 * Authentication is the caller's business: it hands in who the request is from.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';

/** Who reached the upstream: the member label the credential belongs to, and the credential itself. */
export interface Caller {
  member: string;
  credential: string;
  /** OAuth only: the client the token was issued to and its scopes. */
  clientId?: string;
  scopes?: string[];
}

/** A tool the upstream offers besides `whoami` and `echo`. */
export interface UpstreamTool {
  name: string;
  description?: string;
  inputSchema?: Tool['inputSchema'];
  annotations?: Tool['annotations'];
  /** Default: answers the text `<name> called by <member>`. */
  call?: (args: Record<string, unknown>, caller: Caller) => CallToolResult | Promise<CallToolResult>;
}

/** `count` plain tools named tool_001, tool_002, …: enough to make `tools/list` span pages. */
export function manyTools(count: number, prefix = 'tool'): UpstreamTool[] {
  return Array.from({ length: count }, (_, i) => ({
    name: `${prefix}_${String(i + 1).padStart(3, '0')}`,
    description: `Generated tool ${i + 1} of ${count}.`,
  }));
}

const BUILT_IN: UpstreamTool[] = [
  {
    name: 'whoami',
    description: 'Says which member (credential) reached this upstream.',
    call: (_args, caller) => ({
      content: [{ type: 'text', text: caller.member }],
      structuredContent: {
        member: caller.member,
        credential: caller.credential,
        ...(caller.clientId ? { client_id: caller.clientId } : {}),
        ...(caller.scopes ? { scopes: caller.scopes } : {}),
      },
    }),
  },
  {
    name: 'echo',
    description: 'Answers the text it is given.',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    call: (args) => ({ content: [{ type: 'text', text: String(args.text ?? '') }] }),
  },
];

export type Transport = 'streamable_http' | 'sse';

/** One request as an upstream saw it. */
export interface SeenRequest {
  at: number;
  method: string;
  /** Path and query. */
  path: string;
  transport: Transport | null;
  /** The credential as extracted (API key without its prefix, bearer token); null when none came. */
  credential: string | null;
  /** The member the credential belongs to; null when refused. */
  member: string | null;
  accepted: boolean;
  /** JSON-RPC method(s) of a POST body, comma-joined. */
  rpc: string | null;
  /** The W3C `traceparent` header, when one came. */
  traceparent: string | null;
  /** A single message's `params._meta`, when it had one. */
  meta: Record<string, unknown> | null;
}

export interface McpHostOptions {
  name: string;
  tools: () => UpstreamTool[];
  /** `tools/list` page size; undefined: one page. */
  pageSize: () => number | undefined;
  /** Streamable HTTP answers in JSON rather than an SSE stream. */
  jsonResponse?: boolean;
}

type AuthenticatedRequest = IncomingMessage & { auth?: AuthInfo };

/** Builds a fresh SDK server for one request (streamable) or one SSE session. */
function toolServer(options: McpHostOptions): Server {
  const server = new Server({ name: options.name, version: '1.0.0' }, { capabilities: { tools: { listChanged: false } } });
  const all = () => [...BUILT_IN, ...options.tools()];
  server.setRequestHandler(ListToolsRequestSchema, (request) => {
    const tools: Tool[] = all().map((t) => ({
      name: t.name,
      ...(t.description ? { description: t.description } : {}),
      inputSchema: t.inputSchema ?? { type: 'object', properties: {} },
      ...(t.annotations ? { annotations: t.annotations } : {}),
    }));
    const size = options.pageSize();
    if (!size) return { tools };
    const cursor = request.params?.cursor;
    let start = 0;
    if (cursor !== undefined) {
      const decoded = /^offset:(\d+)$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
      if (!decoded) throw new McpError(ErrorCode.InvalidParams, `Unknown cursor ${cursor}`);
      start = Number(decoded[1]);
    }
    const end = start + size;
    return {
      tools: tools.slice(start, end),
      ...(end < tools.length ? { nextCursor: Buffer.from(`offset:${end}`).toString('base64url') } : {}),
    };
  });
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = all().find((t) => t.name === request.params.name);
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool ${request.params.name}`);
    const caller = extra.authInfo?.extra?.caller as Caller | undefined;
    if (!caller) throw new McpError(ErrorCode.InternalError, 'No caller on the request');
    const args = (request.params.arguments ?? {}) as Record<string, unknown>;
    if (tool.call) return tool.call(args, caller);
    return { content: [{ type: 'text', text: `${tool.name} called by ${caller.member}` }] };
  });
  return server;
}

function authInfo(caller: Caller): AuthInfo {
  return { token: caller.credential, clientId: caller.clientId ?? caller.member, scopes: caller.scopes ?? [], extra: { caller } };
}

export async function readBody(req: IncomingMessage, limit = 1_000_000): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new Error('body too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers }).end(JSON.stringify(body));
}

/** The JSON-RPC method names in a parsed body (a message or a batch). */
export function rpcMethods(body: unknown): string | null {
  const list = Array.isArray(body) ? body : [body];
  const names = list.map((m) => (m && typeof m === 'object' && 'method' in m ? String((m as { method: unknown }).method) : null)).filter(Boolean);
  return names.length ? names.join(',') : null;
}

/** Which MCP transport a path belongs to, or null when it is not an MCP path. */
export function mcpTransportOf(pathname: string): Transport | null {
  if (pathname === '/mcp') return 'streamable_http';
  if (pathname === '/sse' || pathname === '/messages') return 'sse';
  return null;
}

/** Serves the MCP paths for an already authenticated caller; keeps the open SSE sessions. */
export function createMcpHost(options: McpHostOptions) {
  const sessions = new Map<string, { transport: SSEServerTransport; server: Server; res: ServerResponse }>();

  async function handle(req: AuthenticatedRequest, res: ServerResponse, url: URL, caller: Caller, body: unknown): Promise<void> {
    req.auth = authInfo(caller);
    if (url.pathname === '/mcp') {
      if (req.method !== 'POST') {
        res.writeHead(405, { allow: 'POST' }).end();
        return;
      }
      const server = toolServer(options);
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: options.jsonResponse ?? false });
      res.on('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(req, res, body);
      return;
    }
    if (url.pathname === '/sse') {
      if (req.method !== 'GET') {
        res.writeHead(405, { allow: 'GET' }).end();
        return;
      }
      const server = toolServer(options);
      const transport = new SSEServerTransport('/messages', res);
      sessions.set(transport.sessionId, { transport, server, res });
      res.on('close', () => {
        sessions.delete(transport.sessionId);
        void server.close();
      });
      await server.connect(transport);
      return;
    }
    // /messages
    if (req.method !== 'POST') {
      res.writeHead(405, { allow: 'POST' }).end();
      return;
    }
    const session = sessions.get(url.searchParams.get('sessionId') ?? '');
    if (!session) {
      sendJson(res, 404, { error: 'unknown session' });
      return;
    }
    await session.transport.handlePostMessage(req, res, body);
  }

  /** Ends every open SSE stream (the upstream going away). */
  function dropSessions() {
    for (const { res, server } of sessions.values()) {
      res.destroy();
      void server.close();
    }
    sessions.clear();
  }

  return { handle, dropSessions, sessions };
}

export async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return `http://127.0.0.1:${port}`;
}

export function closeServer(server: http.Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}

/** Timers that die with the peer, so a pending delay never keeps Jest alive. */
export function timers() {
  const pending = new Set<NodeJS.Timeout>();
  return {
    sleep(ms: number) {
      return new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          pending.delete(t);
          resolve();
        }, ms);
        pending.add(t);
      });
    },
    clear() {
      for (const t of pending) clearTimeout(t);
      pending.clear();
    },
  };
}
