import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP } from 'node:net';
import { urlToHttpOptions } from 'node:url';
import { injectTraceContext } from '../lib/tracing';

/**
 * Outbound calls the server makes on a customer's behalf (webhooks, upstream MCP servers,
 * log backends) must not reach the server's own network. Every address a host name resolves
 * to is checked when the connection is made, so DNS rebinding cannot slip past a check done
 * earlier.
 */
export interface OutboundPolicy {
  allowLoopback: boolean;
  allowPrivate: boolean;
}

// The unspecified addresses reach the host itself on Linux, so they count as loopback.
const loopback = new BlockList();
loopback.addSubnet('127.0.0.0', 8, 'ipv4');
loopback.addSubnet('0.0.0.0', 8, 'ipv4');
loopback.addAddress('::1', 'ipv6');
loopback.addAddress('::', 'ipv6');

// IPv4 special-use ranges (RFC 6890 and successors): none of them is the public internet.
const specialIpv4 = new BlockList();
for (const [net, bits] of [
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  specialIpv4.addSubnet(net, bits, 'ipv4');
}

// IPv6: only global unicast (2000::/3) is public, minus its special-use blocks. Everything
// else, the forms that embed an IPv4 address (::a.b.c.d, ::ffff:0:a.b.c.d, 64:ff9b::/96,
// 64:ff9b:1::/48) and site-local fec0::/10 included, is not.
const globalUnicast = new BlockList();
globalUnicast.addSubnet('2000::', 3, 'ipv6');
const specialIpv6 = new BlockList();
for (const [net, bits] of [
  ['2001::', 23],
  ['2001:db8::', 32],
  ['2002::', 16],
  ['3fff::', 20],
] as const) {
  specialIpv6.addSubnet(net, bits, 'ipv6');
}

type AddressClass = 'loopback' | 'private' | 'public';

/** Addresses classified so far: a kept-alive connection's address is checked again on every reuse. */
const classified = new Map<string, AddressClass>();

export function classifyAddress(address: string): AddressClass {
  let kind = classified.get(address);
  if (kind === undefined) {
    kind = classify(address);
    if (classified.size >= 4096) classified.clear();
    classified.set(address, kind);
  }
  return kind;
}

function classify(address: string): AddressClass {
  const family = isIP(address);
  if (family === 0) throw new Error(`Not an IP address: ${address}`);
  // IPv4-mapped (::ffff:a.b.c.d, or as Node writes it, ::ffff:7f00:1) is the IPv4 address itself.
  const mapped = family === 6 ? mappedIpv4(address) : null;
  if (mapped) return classify(mapped);
  if (family === 4) {
    if (loopback.check(address, 'ipv4')) return 'loopback';
    return specialIpv4.check(address, 'ipv4') ? 'private' : 'public';
  }
  if (loopback.check(address, 'ipv6')) return 'loopback';
  return globalUnicast.check(address, 'ipv6') && !specialIpv6.check(address, 'ipv6') ? 'public' : 'private';
}

function mappedIpv4(address: string): string | null {
  const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (dotted) return dotted;
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (!hex) return null;
  const high = parseInt(hex[1] as string, 16);
  const low = parseInt(hex[2] as string, 16);
  return [high >> 8, high & 255, low >> 8, low & 255].join('.');
}

function allowed(kind: AddressClass, policy: OutboundPolicy): boolean {
  if (kind === 'loopback') return policy.allowLoopback;
  if (kind === 'private') return policy.allowPrivate;
  return true;
}

/** Whether a request that failed on the network may have reached the remote. */
export type NetworkFailure = 'not_sent' | 'maybe_received';

/**
 * An outbound call the server refused or gave up on. `message` is for the customer and never
 * says more than they need (which internal names exist, what a remote said in its status
 * line); `detail` is for the operator's log.
 */
export class OutboundRefused extends Error {
  override readonly name = 'OutboundRefused';
  constructor(
    message: string,
    readonly detail: string = message,
    /**
     * The connection failed or was reset before any answer came (not a refusal of the guard's,
     * nor a deadline): `not_sent` when no connection was made, so the remote never saw the
     * request; `maybe_received` when it may have (and may have acted on it).
     */
    readonly network: NetworkFailure | null = null,
  ) {
    super(message);
  }
}

function hostOf(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '');
}

/**
 * Checks what can be checked without DNS: scheme, credentials in the URL, and literal
 * addresses. Plain http is accepted only for hosts the policy lets the server reach on its
 * own network (a local test receiver); anything public must be https.
 * Returns the reason for refusing, or null.
 */
export function refuseUrl(raw: string, policy: OutboundPolicy): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'is not a valid URL';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must use https';
  if (url.username || url.password) return 'must not carry a user name or password';
  const host = hostOf(url);
  const literal = isIP(host) !== 0 ? classifyAddress(host) : host === 'localhost' || host.endsWith('.localhost') ? 'loopback' : null;
  if (literal !== null && !allowed(literal, policy)) return `points to a ${literal} address, which the server does not call`;
  if (url.protocol === 'http:' && (literal === null || literal === 'public')) return 'must use https';
  return null;
}

function guardedLookup(policy: OutboundPolicy, plainHttp: boolean) {
  return (hostname: string, options: object, callback: (...args: any[]) => void): void => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err);
      for (const { address } of addresses) {
        const kind = classifyAddress(address);
        if (!allowed(kind, policy)) {
          return callback(new OutboundRefused(UNREACHABLE, `${hostname} resolves to ${address}, a ${kind} address`));
        }
        if (plainHttp && kind === 'public') return callback(new OutboundRefused('Plain http to a public address is refused; use https.'));
      }
      const all = (options as { all?: boolean }).all;
      if (all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(new OutboundRefused(UNREACHABLE, `${hostname} has no address`));
      return callback(null, first.address, first.family);
    });
  };
}

/** What a customer is told when the destination cannot be reached, whatever the reason. */
export const UNREACHABLE = 'The destination could not be reached from this server.';

export interface OutboundResponse {
  status: number;
  /** The first bytes of the answer (at most RESPONSE_CAP), for the log; never shown to customers. */
  body: string;
}

/** How much of an answer is read: enough to log, never a whole body a remote chose. */
const RESPONSE_CAP = 4096;

/**
 * POSTs a JSON body under an overall deadline (connecting, sending, the answer's headers and
 * its first RESPONSE_CAP bytes must all fit in `timeoutMs`, however slowly the remote
 * drips), following no redirects (a redirect could lead to a private address). Resolves
 * with the status once the headers and at most RESPONSE_CAP bytes are in.
 */
export function postJson(raw: string, payload: unknown, policy: OutboundPolicy, timeoutMs = 10_000): Promise<OutboundResponse> {
  const refusal = refuseUrl(raw, policy);
  if (refusal) return Promise.reject(new OutboundRefused(`The URL ${refusal}.`));
  const url = new URL(raw);
  const body = Buffer.from(JSON.stringify(payload));
  const client = url.protocol === 'https:' ? https : http;
  const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': body.length, 'user-agent': USER_AGENT };
  injectTraceContext(headers as Record<string, string>);
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      outcome();
    };
    const req = client.request(
      url,
      {
        method: 'POST',
        headers,
        lookup: guardedLookup(policy, url.protocol === 'http:') as any,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        const done = () => {
          finish(() => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8').slice(0, RESPONSE_CAP) }));
          res.destroy();
        };
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          size += chunk.length;
          if (size >= RESPONSE_CAP) done();
        });
        res.on('end', done);
        res.on('error', (err) => finish(() => reject(err)));
      },
    );
    const deadline = setTimeout(() => {
      const timedOut = new OutboundRefused(`No answer within ${timeoutMs / 1000} seconds.`, `no complete answer from ${url.host} within ${timeoutMs} ms`);
      finish(() => reject(timedOut));
      req.destroy(timedOut);
    }, timeoutMs);
    req.on('error', (err) => finish(() => reject(err)));
    req.end(body);
  });
}

/** How the server names itself on every outbound request. */
export const USER_AGENT = 'mcp-control-plane/0.1';

/** A URL for the log: its query may carry a credential (an API key placed there). */
function withoutQuery(raw: string): string {
  const cut = raw.search(/[?#]/);
  return cut === -1 ? raw : `${raw.slice(0, cut)}?…`;
}

/** Limits of one outbound exchange made of several requests (an MCP session, an OAuth flow step). */
export interface OutboundLimits {
  policy: OutboundPolicy;
  /** Everything fetched through the session, answers read to their end, must fit in this. */
  timeoutMs: number;
  /** Bytes of answers read over all the session's requests; past it the answer being read fails. */
  maxBytes: number;
}

/** What a bad remote is told it did, for the operator's log (the customer sees OutboundRefused's message). */
export const TOO_LARGE = 'The answer was larger than this server reads.';

function bodyBytes(body: unknown, headers: Record<string, string>): Buffer | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string') return Buffer.from(body);
  if (body instanceof URLSearchParams) {
    headers['content-type'] ??= 'application/x-www-form-urlencoded;charset=UTF-8';
    return Buffer.from(body.toString());
  }
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  if (ArrayBuffer.isView(body)) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError('The outbound guard sends string, form or byte bodies only.');
}

/**
 * A `fetch` for code that expects one (the MCP SDK's transports, OAuth calls) with the
 * guard's rules: the URL is checked before any connection and every address a name resolves
 * to when the connection is made (loopback and private networks only as the policy allows),
 * no redirect is followed (answered as they are), one overall deadline covers every request
 * made through it and the reading of their answers, and the answers together may not exceed
 * `maxBytes`. Answers stream (server-sent events work); `close()` ends whatever is open.
 */
export class OutboundSession {
  private readonly deadline = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private bytesRead = 0;

  constructor(
    private readonly limits: OutboundLimits,
    signal?: AbortSignal,
  ) {
    this.timer = setTimeout(() => {
      this.deadline.abort(
        new OutboundRefused(`No answer within ${limits.timeoutMs / 1000} seconds.`, `outbound session over its ${limits.timeoutMs} ms deadline`),
      );
    }, limits.timeoutMs);
    this.timer.unref();
    if (signal) {
      if (signal.aborted) this.close();
      else signal.addEventListener('abort', () => this.close(), { once: true });
    }
  }

  /** The session's signal: aborted at the deadline or on close. */
  get signal(): AbortSignal {
    return this.deadline.signal;
  }

  close(): void {
    clearTimeout(this.timer);
    if (!this.deadline.signal.aborted) this.deadline.abort(new OutboundRefused('The outbound call was cancelled.'));
  }

  readonly fetch = (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const raw = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const refusal = refuseUrl(raw, this.limits.policy);
    if (refusal) return Promise.reject(new OutboundRefused(UNREACHABLE, `${withoutQuery(raw)} ${refusal}`));
    if (this.deadline.signal.aborted) return Promise.reject(this.deadline.signal.reason);
    const url = new URL(raw);
    const headers: Record<string, string> = { 'user-agent': USER_AGENT };
    new Headers(init.headers).forEach((value, name) => {
      headers[name] = value;
    });
    let body: Buffer | undefined;
    try {
      body = bodyBytes(init.body, headers);
    } catch (err) {
      return Promise.reject(err);
    }
    if (body) headers['content-length'] = String(body.length);
    // Set last: the caller's headers never carry a trace of their own.
    injectTraceContext(headers);
    const signals = [this.deadline.signal, ...(init.signal ? [init.signal] : [])];
    const signal = signals.length === 1 ? this.deadline.signal : AbortSignal.any(signals);
    const client = url.protocol === 'https:' ? https : http;
    const method = (init.method ?? 'GET').toUpperCase();
    return new Promise<Response>((resolve, reject) => {
      const req = client.request(url, { method, headers, lookup: guardedLookup(this.limits.policy, url.protocol === 'http:') as any }, (res) => {
        const responseHeaders = new Headers();
        for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) responseHeaders.append(res.rawHeaders[i] as string, res.rawHeaders[i + 1] as string);
        const status = res.statusCode ?? 502;
        const noBody = method === 'HEAD' || status === 204 || status === 304;
        let ended = false;
        const stream = noBody
          ? null
          : new ReadableStream<Uint8Array>({
              start: (controller) => {
                const fail = (err: unknown) => {
                  if (ended) return;
                  ended = true;
                  controller.error(err);
                  res.destroy();
                };
                res.on('data', (chunk: Buffer) => {
                  if (ended) return;
                  this.bytesRead += chunk.length;
                  if (this.bytesRead > this.limits.maxBytes) {
                    fail(new OutboundRefused(TOO_LARGE, `answers from ${url.host} passed ${this.limits.maxBytes} bytes`));
                    return;
                  }
                  controller.enqueue(new Uint8Array(chunk));
                });
                res.on('end', () => {
                  if (ended) return;
                  ended = true;
                  controller.close();
                });
                res.on('error', fail);
                res.on('close', () => fail(signal.aborted ? signal.reason : new OutboundRefused(UNREACHABLE, `${url.host} closed the answer early`)));
                signal.addEventListener('abort', () => fail(signal.reason), { once: true });
              },
              cancel: () => {
                ended = true;
                res.destroy();
              },
            });
        if (noBody) res.resume();
        resolve(new Response(stream, { status, statusText: res.statusMessage ?? '', headers: responseHeaders }));
      });
      const onAbort = () => {
        req.destroy(signal.reason instanceof Error ? signal.reason : new OutboundRefused('The outbound call was cancelled.'));
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      req.on('close', () => signal.removeEventListener('abort', onAbort));
      req.on('error', (err) =>
        reject(err instanceof OutboundRefused ? err : new OutboundRefused(UNREACHABLE, `${url.host}: ${err.message}`, 'maybe_received')),
      );
      req.end(body);
    });
  };
}

/** The deadline of a `guardedRequest` passed: the remote may still be working on it. */
export class OutboundDeadline extends OutboundRefused {}

interface CheckedTarget {
  href: string;
  /** The policy the refusal was worked out under (its values: a policy object may change). */
  allowLoopback: boolean;
  allowPrivate: boolean;
  /** Why the URL is refused under the policy, or null. */
  refusal: string | null;
  /** The URL as http.request options. */
  options: http.RequestOptions;
}

/** What guardedRequest works out from a URL once: a pooled session sends every request to the same URL object. */
const checkedTargets = new WeakMap<URL, CheckedTarget>();

function checkedTarget(url: URL, policy: OutboundPolicy): CheckedTarget {
  const href = url.href;
  let target = checkedTargets.get(url);
  if (!target || target.href !== href || target.allowLoopback !== policy.allowLoopback || target.allowPrivate !== policy.allowPrivate) {
    const { allowLoopback, allowPrivate } = policy;
    const host = hostOf(url);
    // The TLS server name the agent would otherwise work out on every request (none for an address).
    const options = { ...urlToHttpOptions(url), servername: isIP(host) === 0 ? host : '' };
    target = { href, allowLoopback, allowPrivate, refusal: refuseUrl(href, policy), options };
    checkedTargets.set(url, target);
  }
  return target;
}

const IDLE_SOCKET_MS = 4_000;
/** Connections one kept upstream session (one connection's credential at one upstream) opens at most at once. */
const UPSTREAM_SOCKETS = 16;

/**
 * A keep-alive agent for one remote: requests made through it with `guardedRequest` reuse
 * its connections (no new TCP and TLS handshake per request). The guard's lookup is given
 * with every request, so whatever socket the agent opens for one of them is checked when it
 * connects; a reused socket's address is checked again against the policy of the moment.
 */
export function keepAliveAgent(url: URL): http.Agent {
  // A timeout is what makes Node's agent honour a server's `Keep-Alive: timeout=N` (it closes
  // the idle socket a second before the server would); without one the hint is read and
  // dropped, and a request sent as the server closes an idle socket is reset, having maybe
  // reached it. 4 s when the server gives no hint, as undici (Node's fetch) does. The agent
  // destroys only idle sockets at it: a request in use is timed by its own deadline.
  // At most UPSTREAM_SOCKETS connections at once: whatever an upstream makes us send (answers
  // to its own requests, many calls at once) waits for one rather than opening more.
  const options = { keepAlive: true, scheduling: 'lifo' as const, timeout: IDLE_SOCKET_MS, maxSockets: UPSTREAM_SOCKETS };
  return url.protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
}

/** An answer's head; its body must then be read (`read`) or let go (`discard`), which ends the deadline. */
export interface GuardedResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /**
   * Hands each chunk of the body to `onChunk` and resolves at its end. Rejects with
   * OutboundRefused past the deadline or the byte cap, on the caller's abort, or when the
   * remote cuts the answer short; the request is destroyed then.
   */
  read(onChunk: (chunk: Buffer) => void): Promise<void>;
  /** The body is not wanted: drained (so the connection can be reused) under the same deadline and cap. */
  discard(): void;
}

export interface GuardedRequestInit {
  method: string;
  headers: Record<string, string>;
  body?: Buffer;
  agent: http.Agent;
}

/**
 * One request under the guard's rules, for callers that keep connections open between
 * requests (the pooled upstream MCP sessions): the URL is checked before anything is sent,
 * every address a name resolves to when a connection is made, a reused connection's address
 * again; no redirect is followed; `limits.timeoutMs` covers this request from its start to
 * the end of its answer's body and `limits.maxBytes` caps that body. A connection that fails
 * or is reset before any answer came rejects with OutboundRefused whose `network` is true.
 */
export function guardedRequest(url: URL, init: GuardedRequestInit, limits: OutboundLimits, signal?: AbortSignal): Promise<GuardedResponse> {
  const { policy } = limits;
  const target = checkedTarget(url, policy);
  if (target.refusal) return Promise.reject(new OutboundRefused(UNREACHABLE, `${withoutQuery(url.href)} ${target.refusal}`));
  if (signal?.aborted) return Promise.reject(new OutboundRefused('The outbound call was cancelled.'));
  const plainHttp = url.protocol === 'http:';
  const headers: Record<string, string> = { 'user-agent': USER_AGENT, ...init.headers };
  if (init.body) headers['content-length'] = String(init.body.length);
  injectTraceContext(headers);
  const client = plainHttp ? http : https;
  return new Promise<GuardedResponse>((resolve, reject) => {
    let failure: OutboundRefused | null = null;
    let settled = false;
    // Set once the body is being read: its end or failure goes there.
    let reading: { resolve: () => void; reject: (err: OutboundRefused) => void } | null = null;
    let response: http.IncomingMessage | null = null;
    const done = () => {
      clearTimeout(deadline);
      signal?.removeEventListener('abort', onAbort);
    };
    const fail = (err: OutboundRefused) => {
      if (failure || settled) return;
      failure = err;
      done();
      req?.destroy(err);
      response?.destroy(err);
      if (reading) reading.reject(err);
      else if (!response) reject(err);
    };
    const onAbort = () => fail(new OutboundRefused('The outbound call was cancelled.'));
    const deadline = setTimeout(
      () =>
        fail(new OutboundDeadline(`No answer within ${limits.timeoutMs / 1000} seconds.`, `no complete answer from ${url.host} within ${limits.timeoutMs} ms`)),
      limits.timeoutMs,
    );
    signal?.addEventListener('abort', onAbort, { once: true });

    let req: http.ClientRequest | undefined;
    try {
      req = client.request({ ...target.options, method: init.method, headers, agent: init.agent, lookup: guardedLookup(policy, plainHttp) as any }, onResponse);
    } catch (err) {
      // Headers Node refuses (a credential header with a character HTTP does not allow).
      done();
      reject(new OutboundRefused(UNREACHABLE, `${url.host}: ${err instanceof Error ? err.message : String(err)}`));
      return;
    }
    function onResponse(res: http.IncomingMessage) {
      response = res;
      let size = 0;
      let onChunk: ((chunk: Buffer) => void) | null = null;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > limits.maxBytes) return fail(new OutboundRefused(TOO_LARGE, `the answer from ${url.host} passed ${limits.maxBytes} bytes`));
        onChunk?.(chunk);
      });
      res.on('end', () => {
        if (failure || settled) return;
        settled = true;
        done();
        reading?.resolve();
      });
      res.on('error', (err) => fail(err instanceof OutboundRefused ? err : new OutboundRefused(UNREACHABLE, `${url.host}: ${err.message}`)));
      res.on('close', () => {
        if (!res.complete) fail(new OutboundRefused(UNREACHABLE, `${url.host} closed the answer early`));
      });
      res.pause();
      const start = (sink: (chunk: Buffer) => void) =>
        new Promise<void>((resolveRead, rejectRead) => {
          if (failure) return rejectRead(failure);
          reading = { resolve: resolveRead, reject: rejectRead };
          onChunk = sink;
          if (settled) resolveRead();
          else res.resume();
        });
      resolve({
        status: res.statusCode ?? 502,
        headers: res.headers,
        read: start,
        discard: () => void start(() => undefined).catch(() => undefined),
      });
    }
    // Whether the request may have reached the remote: once a connection is made (a TLS one
    // once its handshake is done), or at once on a kept-alive socket.
    let connected = false;
    req.on('socket', (socket) => {
      if (socket.connecting) {
        socket.once(plainHttp ? 'connect' : 'secureConnect', () => (connected = true));
        return;
      }
      connected = true;
      // A kept-alive socket was checked when it connected; the policy may have changed since.
      const address = socket.remoteAddress;
      if (!address) return;
      const kind = classifyAddress(address);
      if (!allowed(kind, policy)) fail(new OutboundRefused(UNREACHABLE, `${url.host} is connected to ${address}, a ${kind} address`));
      else if (plainHttp && kind === 'public') fail(new OutboundRefused('Plain http to a public address is refused; use https.'));
    });
    req.on('error', (err) => {
      if (failure || response) return;
      fail(err instanceof OutboundRefused ? err : new OutboundRefused(UNREACHABLE, `${url.host}: ${err.message}`, connected ? 'maybe_received' : 'not_sent'));
    });
    req.end(init.body);
  });
}
