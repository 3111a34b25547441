/**
 * The HTTP server every loopback upstream peer runs on (node:http on 127.0.0.1:0): records each
 * request, applies the levers (down, delay), authenticates MCP requests and hands them to the
 * MCP host; other paths go to the peer's own routes (the OAuth endpoints).
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import {
  closeServer,
  createMcpHost,
  listen,
  mcpTransportOf,
  readBody,
  rpcMethods,
  sendJson,
  timers,
  type Caller,
  type SeenRequest,
  type Transport,
  type UpstreamTool,
} from './mcp';

export type Authentication = { caller: Caller } | { credential: string | null; refuse: (res: ServerResponse) => void };

export interface UpstreamServerOptions {
  name: string;
  /** Which MCP endpoint `.url` names; both are served. Default streamable_http. */
  transport?: Transport;
  tools?: UpstreamTool[];
  pageSize?: number;
  jsonResponse?: boolean;
  delayMs?: number;
  /** The server's keep-alive timeout (Node's default 5 s), announced in `Keep-Alive: timeout=N`. */
  keepAliveTimeoutMs?: number;
  authenticate: (req: IncomingMessage, url: URL) => Authentication;
  /** Non-MCP paths; answers and returns true when it handled the request. */
  route?: (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<boolean>;
}

/** Levers and records every upstream peer has. */
export interface UpstreamPeer {
  /** The MCP endpoint for the chosen transport: `<origin>/mcp` or `<origin>/sse`. */
  url: string;
  /** `http://127.0.0.1:<port>` */
  origin: string;
  urls: { streamable_http: string; sse: string };
  /** Every request that reached an MCP path, with its credential. */
  seen: SeenRequest[];
  /** Wait this long before answering any request (settable). */
  delayMs: number;
  /** `tools/list` page size (settable); undefined: one page. */
  pageSize: number | undefined;
  /** Replaces the extra tools (whoami and echo stay). */
  setTools(tools: UpstreamTool[]): void;
  /**
   * From now on answer 503 (default), cut every connection, or hang (accept connections and
   * requests, never answer); open SSE streams end either way, but for a hang.
   */
  down(mode?: '503' | 'close' | 'hang'): void;
  up(): void;
  /** Cuts every connection now (requests in flight included), and goes on serving new ones. */
  cut(): void;
  /** Connections open now. */
  openConnections(): number;
  close(): Promise<void>;
}

export async function startUpstreamServer(options: UpstreamServerOptions): Promise<UpstreamPeer> {
  let tools = options.tools ?? [];
  let downMode: '503' | 'close' | 'hang' | null = null;
  const clock = timers();
  const peer = {} as UpstreamPeer;
  const host = createMcpHost({ name: options.name, tools: () => tools, pageSize: () => peer.pageSize, jsonResponse: options.jsonResponse });

  async function serve(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    if (downMode === 'close') {
      req.socket.destroy();
      return;
    }
    // Read nothing, answer nothing: the connection stays open until the caller gives up.
    if (downMode === 'hang') return;
    if (peer.delayMs > 0) await clock.sleep(peer.delayMs);
    if (downMode === '503') {
      res.writeHead(503, { 'content-type': 'text/plain', 'retry-after': '1' }).end('down');
      return;
    }
    const transport = mcpTransportOf(url.pathname);
    if (!transport) {
      if (options.route && (await options.route(req, res, url))) return;
      sendJson(res, 404, { error: 'not_found' });
      return;
    }
    let body: unknown;
    let rpc: string | null = null;
    if (req.method === 'POST') {
      const text = await readBody(req);
      try {
        body = JSON.parse(text);
        rpc = rpcMethods(body);
      } catch {
        sendJson(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
        return;
      }
    }
    const auth = options.authenticate(req, url);
    const record: SeenRequest = {
      at: Date.now(),
      method: req.method ?? '',
      path: req.url ?? '',
      transport,
      credential: 'caller' in auth ? auth.caller.credential : auth.credential,
      member: 'caller' in auth ? auth.caller.member : null,
      accepted: 'caller' in auth,
      rpc,
      traceparent: typeof req.headers.traceparent === 'string' ? req.headers.traceparent : null,
      meta:
        body && typeof body === 'object' && !Array.isArray(body) ? ((body as { params?: { _meta?: Record<string, unknown> } }).params?._meta ?? null) : null,
    };
    peer.seen.push(record);
    if (!('caller' in auth)) {
      auth.refuse(res);
      return;
    }
    await host.handle(req, res, url, auth.caller, body);
  }

  const server = http.createServer((req, res) => {
    serve(req, res).catch((error: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { error: 'server_error', error_description: String(error) });
      else res.destroy();
    });
  });
  if (options.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = options.keepAliveTimeoutMs;
  const open = new Set<Socket>();
  server.on('connection', (socket) => {
    open.add(socket);
    socket.on('close', () => open.delete(socket));
  });
  const origin = await listen(server);
  const urls = { streamable_http: `${origin}/mcp`, sse: `${origin}/sse` };
  Object.assign(peer, {
    url: urls[options.transport ?? 'streamable_http'],
    origin,
    urls,
    seen: [],
    delayMs: options.delayMs ?? 0,
    pageSize: options.pageSize,
    setTools(next: UpstreamTool[]) {
      tools = next;
    },
    down(mode: '503' | 'close' | 'hang' = '503') {
      downMode = mode;
      if (mode === 'hang') return;
      host.dropSessions();
      if (mode === 'close') server.closeAllConnections();
    },
    up() {
      downMode = null;
    },
    cut() {
      server.closeAllConnections();
    },
    openConnections: () => open.size,
    async close() {
      clock.clear();
      host.dropSessions();
      await closeServer(server);
    },
  } satisfies UpstreamPeer);
  return peer;
}
