import type http from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { ErrorCode, LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, type Progress } from '@modelcontextprotocol/sdk/types.js';
import { CLIENT_INFO, UpstreamRejected, UpstreamUnavailable, type UpstreamCallResult, type UpstreamTarget } from './client';
import { traceContextMeta } from '../../lib/tracing';
import { guardedRequest, keepAliveAgent, OutboundDeadline, OutboundRefused, type GuardedResponse, type OutboundLimits } from '../../outbound/client';

/**
 * A Streamable HTTP MCP session kept open by the upstream pool: a JSON-RPC client of its own
 * over node:http with a keep-alive agent, rather than the SDK's Client and transport. A
 * pooled `tools/call` is the hot path of the MCP endpoint, and the SDK's layers (web
 * Headers/Response/streams per request, its Protocol machinery, a zod parse of every message)
 * cost more CPU than the call itself. This client does only what a pooled call needs:
 * `initialize`, `tools/call` (answered as JSON or as server-sent events, with progress and
 * cancellation), and ending the session. The result passes through as the upstream gave it.
 *
 * Every request goes through the outbound guard (`guardedRequest`: the URL checked before
 * connecting, addresses when connecting, a deadline and a byte cap per request, no
 * redirects). The credential goes on every request as `credentialFetch` places it; all
 * requests go to the MCP URL itself, so never to another origin.
 */

type JsonRpcId = string | number;

interface JsonRpcMessage {
  jsonrpc?: unknown;
  id?: unknown;
  method?: unknown;
  params?: unknown;
  result?: unknown;
  error?: unknown;
}

/** The upstream answered a status that is neither a success nor a refusal of the credential. */
export class UpstreamHttpError extends Error {
  override readonly name = 'UpstreamHttpError';
  constructor(
    readonly status: number,
    detail: string,
  ) {
    super(detail);
  }
}

/** The upstream answered something other than what MCP requires. */
export class NotMcpAnswer extends Error {
  override readonly name = 'NotMcpAnswer';
}

/** A JSON-RPC error the upstream answered a request with, worded as the SDK's McpError (the text customers saw so far). */
export class JsonRpcErrorAnswer extends Error {
  override readonly name = 'JsonRpcErrorAnswer';
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(`MCP error ${code}: ${message}`);
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function mediaType(headers: http.IncomingHttpHeaders): string {
  return (headers['content-type'] ?? '').split(';', 1)[0]!.trim().toLowerCase();
}

/** The first bytes of an answer not wanted, for the operator's log; whatever goes wrong reading it does not matter. */
async function excerpt(res: GuardedResponse): Promise<string> {
  let text = '';
  await res
    .read((chunk) => {
      if (text.length < 512) text += chunk.toString('utf8');
    })
    .catch(() => undefined);
  return text.slice(0, 512).trim();
}

/**
 * Server-sent events as the upstream streams them (the WHATWG rules: lines end at CRLF, LF or
 * CR; `data` lines of one event join with LF; an empty line ends the event). Only `message`
 * events carry JSON-RPC; ids and retry hints are not kept (streams are not resumed).
 */
class SseParser {
  private readonly decoder = new StringDecoder('utf8');
  private buffer = '';
  private data: string[] = [];
  private event = '';

  constructor(private readonly onMessage: (data: string) => void) {}

  push(chunk: Buffer): void {
    this.buffer += this.decoder.write(chunk);
    let start = 0;
    for (;;) {
      const lf = this.buffer.indexOf('\n', start);
      const cr = this.buffer.indexOf('\r', start);
      const end = cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf);
      if (end === -1) break;
      // A CR at the end of what came may be the first half of a CRLF split across chunks.
      if (end === cr && end === this.buffer.length - 1) break;
      this.line(this.buffer.slice(start, end));
      start = end + (end === cr && this.buffer[end + 1] === '\n' ? 2 : 1);
    }
    this.buffer = this.buffer.slice(start);
  }

  private line(line: string): void {
    if (line === '') {
      if (this.data.length > 0 && (this.event === '' || this.event === 'message')) this.onMessage(this.data.join('\n'));
      this.data = [];
      this.event = '';
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
  }
}

/**
 * An upstream's own requests (a `ping`, a `sampling/createMessage`) each need an answer, a
 * request of ours. An upstream can put thousands in one event stream: they are answered at
 * most ANSWERS_IN_FLIGHT at a time per call, at most ANSWERS_WAITING wait their turn, and
 * beyond that they go unanswered (nothing a client owes an upstream that floods it).
 */
const ANSWERS_IN_FLIGHT = 4;
const ANSWERS_WAITING = 32;

class AnswerQueue {
  private inFlight = 0;
  private readonly waiting: unknown[] = [];

  constructor(private readonly deliver: (message: unknown) => Promise<void>) {}

  push(message: unknown): void {
    if (this.waiting.length >= ANSWERS_WAITING) return;
    this.waiting.push(message);
    this.next();
  }

  private next(): void {
    while (this.inFlight < ANSWERS_IN_FLIGHT && this.waiting.length > 0) {
      const message = this.waiting.shift();
      this.inFlight += 1;
      void this.deliver(message).finally(() => {
        this.inFlight -= 1;
        this.next();
      });
    }
  }
}

export class UpstreamSession {
  /** The last 401/403 the upstream answered in this session. */
  refused: UpstreamRejected | null = null;
  /** The upstream answered 404 (or 400) to a request that carried the session id: it no longer knows the session. */
  gone = false;
  private sessionId: string | null = null;
  private protocolVersion: string | null = null;
  private composed: { sessionId: string | null; protocolVersion: string | null; headers: Record<string, string> } | null = null;
  private nextId = 0;
  private closed = false;
  private readonly url: URL;
  private readonly headers: Record<string, string>;
  private readonly agent: http.Agent;

  constructor(
    target: UpstreamTarget,
    /** For the requests no call waits for: `notifications/initialized`, answers to the upstream's requests, cancellations, DELETE. */
    private readonly limits: OutboundLimits,
  ) {
    this.url = new URL(target.url);
    const headers: Record<string, string> = { accept: 'application/json, text/event-stream', 'content-type': 'application/json' };
    const { credential } = target;
    // As credentialFetch places it; set last, so a connector's header name wins as it did there.
    if (credential.kind === 'header') headers[credential.name.toLowerCase()] = credential.value;
    else if (credential.kind === 'bearer') headers.authorization = `Bearer ${credential.token}`;
    else if (credential.kind === 'query') this.url.searchParams.set(credential.name, credential.value);
    this.headers = headers;
    this.agent = keepAliveAgent(this.url);
  }

  /**
   * `initialize` (answered as JSON or as an event stream), then `notifications/initialized`.
   * A protocol version the SDK does not know is refused: nothing else here could speak it.
   */
  async open(): Promise<void> {
    const answer = await this.request(
      this.newId(),
      'initialize',
      { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: CLIENT_INFO },
      this.limits,
    );
    if (answer.error !== undefined) throw errorOf(answer.error);
    const version = isObject(answer.result) ? answer.result.protocolVersion : undefined;
    if (typeof version !== 'string' || !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) {
      throw new UpstreamUnavailable(
        'The upstream MCP server speaks a protocol version this server does not support.',
        `initialize answered protocolVersion ${JSON.stringify(version)}`,
      );
    }
    this.protocolVersion = version;
    const res = await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' }, this.limits);
    await res.read(() => undefined);
  }

  /**
   * `tools/call`; the upstream's result as it gave it. A JSON-RPC error answer is a result
   * with `isError: true` (as `callWith` words it), except the two codes the SDK itself uses
   * for a call that got no answer (a timeout, a closed connection), which throw.
   */
  async callTool(
    name: string,
    args: Record<string, unknown>,
    limits: OutboundLimits,
    signal?: AbortSignal,
    onprogress?: (progress: Progress) => void,
  ): Promise<UpstreamCallResult> {
    if (signal?.aborted) throw new OutboundRefused('The outbound call was cancelled.');
    const id = this.newId();
    // MCP reserves traceparent and tracestate in _meta for W3C Trace Context (beside the HTTP header, which covers only the HTTP request).
    const trace = traceContextMeta();
    const meta = onprogress || trace ? { ...trace, ...(onprogress ? { progressToken: id } : {}) } : undefined;
    const params = { name, arguments: args, ...(meta ? { _meta: meta } : {}) };
    let answer: JsonRpcMessage;
    try {
      answer = await this.request(id, 'tools/call', params, limits, signal, onprogress);
    } catch (err) {
      // The upstream may still be working on it: told to stop, as the SDK client does on an abort or its timeout.
      if (signal?.aborted) this.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: String(signal.reason) } });
      else if (err instanceof OutboundDeadline) this.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: err.detail } });
      throw err;
    }
    if (answer.error !== undefined) {
      const error = errorOf(answer.error);
      if (error instanceof NotMcpAnswer) throw error;
      if (error.code === ErrorCode.RequestTimeout || error.code === ErrorCode.ConnectionClosed) throw error;
      return { isError: true, content: [{ type: 'text', text: `The upstream refused the call: ${error.message}` }] };
    }
    if (!isObject(answer.result)) throw new NotMcpAnswer('tools/call was answered with a result that is not an object');
    const problem = toolResultProblem(answer.result);
    if (problem) throw new NotMcpAnswer(`tools/call was answered with a result MCP clients cannot read: ${problem}`);
    return answer.result as UpstreamCallResult;
  }

  /** Ends the session at an upstream that keeps them (DELETE, best effort) and the kept connections. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      if (this.sessionId !== null && !this.gone) {
        const res = await guardedRequest(this.url, { method: 'DELETE', headers: this.requestHeaders(), agent: this.agent }, this.limits);
        await res.read(() => undefined);
      }
    } catch {
      // The upstream forgets the session on its own in time.
    } finally {
      this.agent.destroy();
    }
  }

  private newId(): number {
    this.nextId += 1;
    return this.nextId;
  }

  /** The headers of every request, with the session id and protocol version once known (worked out again only when they change). */
  private requestHeaders(): Record<string, string> {
    if (this.sessionId === null && this.protocolVersion === null) return this.headers;
    if (this.composed?.sessionId !== this.sessionId || this.composed.protocolVersion !== this.protocolVersion) {
      const headers = {
        ...this.headers,
        ...(this.sessionId !== null ? { 'mcp-session-id': this.sessionId } : {}),
        ...(this.protocolVersion !== null ? { 'mcp-protocol-version': this.protocolVersion } : {}),
      };
      this.composed = { sessionId: this.sessionId, protocolVersion: this.protocolVersion, headers };
    }
    return this.composed.headers;
  }

  /** POSTs one message; answers its response once the status is a success, else throws (UpstreamRejected for 401/403). */
  private async post(message: unknown, limits: OutboundLimits, signal?: AbortSignal): Promise<GuardedResponse> {
    const withSession = this.sessionId !== null;
    const res = await guardedRequest(
      this.url,
      { method: 'POST', headers: this.requestHeaders(), body: Buffer.from(JSON.stringify(message)), agent: this.agent },
      limits,
      signal,
    );
    if (res.status >= 200 && res.status < 300) return res;
    if (res.status === 401 || res.status === 403) {
      res.discard();
      const challenge = res.headers['www-authenticate'];
      this.refused = new UpstreamRejected(res.status, challenge ?? null);
      throw this.refused;
    }
    if ((res.status === 404 || res.status === 400) && withSession) this.gone = true;
    const text = await excerpt(res);
    throw new UpstreamHttpError(res.status, `POST ${this.url.pathname} answered HTTP ${res.status}${text ? `: ${text}` : ''}`);
  }

  /** A message no caller waits for (a notification, an answer to the upstream's request): sent, its answer let go. */
  private send(message: unknown): void {
    void this.deliver(message);
  }

  /** Sends a message and lets its answer go; resolves once the answer is read (or the request failed), never rejects. */
  private deliver(message: unknown): Promise<void> {
    return this.post(message, this.limits).then(
      (res) => res.read(() => undefined).catch(() => undefined),
      () => undefined,
    );
  }

  /** One request and its response (ours, by id), from a JSON answer or an event stream. */
  private async request(
    id: JsonRpcId,
    method: string,
    params: unknown,
    limits: OutboundLimits,
    signal?: AbortSignal,
    onprogress?: (progress: Progress) => void,
  ): Promise<JsonRpcMessage> {
    const res = await this.post({ jsonrpc: '2.0', id, method, params }, limits, signal);
    if (method === 'initialize') {
      const sessionId = res.headers['mcp-session-id'];
      if (typeof sessionId === 'string' && sessionId !== '') this.sessionId = sessionId;
    }
    const type = mediaType(res.headers);
    if (type === 'text/event-stream') return this.fromStream(res, id, onprogress);
    if (type !== 'application/json') {
      res.discard();
      throw new NotMcpAnswer(`${method} was answered with HTTP ${res.status} and ${type ? `content type ${type}` : 'no content type'}`);
    }
    const chunks: Buffer[] = [];
    await res.read((chunk) => chunks.push(chunk));
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      throw new NotMcpAnswer(`${method} was answered with JSON that does not parse`);
    }
    for (const message of Array.isArray(parsed) ? parsed : [parsed]) {
      if (isResponse(message, id)) return message;
    }
    throw new NotMcpAnswer(`${method} was answered without a response to request ${id}`);
  }

  /**
   * Reads an event stream until our response: progress for our token goes to `onprogress`,
   * other notifications are let go, the upstream's own requests are answered (this server
   * offers the upstream nothing: `ping` gets `{}`, anything else "Method not found"). The
   * rest of the stream is drained after our response, under the same deadline.
   */
  private fromStream(res: GuardedResponse, id: JsonRpcId, onprogress?: (progress: Progress) => void): Promise<JsonRpcMessage> {
    const answers = new AnswerQueue((message) => this.deliver(message));
    return new Promise<JsonRpcMessage>((resolve, reject) => {
      let answer: JsonRpcMessage | null = null;
      const parser = new SseParser((data) => {
        if (answer) return;
        let parsed: unknown;
        try {
          parsed = JSON.parse(data);
        } catch {
          return; // As the SDK does: an event that is not JSON is skipped, the stream read on.
        }
        for (const message of Array.isArray(parsed) ? parsed : [parsed]) {
          if (!isObject(message) || answer) continue;
          if (typeof message.method === 'string') {
            if (message.id !== undefined && message.id !== null) this.answerRequest(message, answers);
            else if (onprogress && message.method === 'notifications/progress') progressOf(message.params, id, onprogress);
          } else if (isResponse(message, id)) {
            answer = message;
            resolve(message);
          }
        }
      });
      res
        .read((chunk) => parser.push(chunk))
        .then(
          () => {
            if (!answer) reject(new NotMcpAnswer(`the event stream ended without a response to request ${id}`));
          },
          (err: unknown) => {
            if (!answer) reject(err);
          },
        );
    });
  }

  private answerRequest(request: Record<string, unknown>, answers: AnswerQueue): void {
    const { id } = request;
    if (typeof id !== 'string' && typeof id !== 'number') return;
    answers.push(
      request.method === 'ping'
        ? { jsonrpc: '2.0', id, result: {} }
        : { jsonrpc: '2.0', id, error: { code: ErrorCode.MethodNotFound, message: 'Method not found' } },
    );
  }
}

function isResponse(message: unknown, id: JsonRpcId): message is JsonRpcMessage {
  return isObject(message) && message.id === id && message.method === undefined && ('result' in message || 'error' in message);
}

const isString = (value: unknown): value is string => typeof value === 'string';

/** What each content block type must carry for an MCP client (the SDK's ContentBlock) to read it. */
const CONTENT_BLOCKS: Record<string, (block: Record<string, unknown>) => boolean> = {
  text: (b) => isString(b.text),
  image: (b) => isString(b.data) && isString(b.mimeType),
  audio: (b) => isString(b.data) && isString(b.mimeType),
  resource_link: (b) => isString(b.uri) && isString(b.name),
  resource: (b) => isObject(b.resource) && isString(b.resource.uri) && (isString(b.resource.text) || isString(b.resource.blob)),
};

/**
 * Why a `tools/call` result is not one clients read (CallToolResult: content blocks of the
 * known types, `isError` a boolean, `structuredContent` an object), or null. The result is
 * passed through unparsed, so this is what stands in for the SDK's schema: a result a client
 * would refuse whole becomes a tool error the model can act on.
 */
function toolResultProblem(result: Record<string, unknown>): string | null {
  if (result.isError !== undefined && typeof result.isError !== 'boolean') return 'isError is not a boolean';
  if (result.structuredContent !== undefined && !isObject(result.structuredContent)) return 'structuredContent is not an object';
  if (result.content === undefined) return null;
  if (!Array.isArray(result.content)) return 'content is not an array';
  for (const [i, block] of result.content.entries()) {
    const type = isObject(block) ? block.type : undefined;
    const check = isString(type) && Object.hasOwn(CONTENT_BLOCKS, type) ? CONTENT_BLOCKS[type] : undefined;
    if (!check) return `content[${i}] is of no known type (${JSON.stringify(type ?? null).slice(0, 40)})`;
    if (!check(block as Record<string, unknown>)) return `content[${i}] (${type}) lacks what its type carries`;
  }
  return null;
}

function errorOf(error: unknown): JsonRpcErrorAnswer | NotMcpAnswer {
  if (!isObject(error) || typeof error.code !== 'number' || typeof error.message !== 'string')
    return new NotMcpAnswer('an error answer without a numeric code and a message');
  return new JsonRpcErrorAnswer(error.code, error.message);
}

function progressOf(params: unknown, id: JsonRpcId, onprogress: (progress: Progress) => void): void {
  if (!isObject(params) || params.progressToken !== id || typeof params.progress !== 'number') return;
  const { progressToken: _token, ...progress } = params;
  try {
    onprogress(progress as Progress);
  } catch {
    // A listener's failure is not the upstream's: the call goes on.
  }
}
