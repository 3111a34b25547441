import http, { type IncomingHttpHeaders } from 'node:http';
import { startTestApp, type TestApp } from '../support/app';
import { connectionClient } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { startApiKeyUpstream, startEverythingServer, useUpstream, type EverythingServer } from '../support/upstream-mcp';
import { closeServer, listen, readBody, sendJson } from '../support/upstream/mcp';
import { customConnector } from '../fixtures/connections';
import { connectMember, mintMcpServer } from '../support/mcp';

/*
 * The upstream MCP sessions the endpoint `/mcp/{mcpId}` keeps per connection and credential
 * (src/mcp/upstream/pool.ts), seen from the upstreams: the API-key peer records every
 * request it gets (`initialize` included), server-everything keeps sessions and forgets them
 * when it restarts.
 */

const KEY_A = 'key-alice-Po1Qz8';
const KEY_A2 = 'key-alice-rotated-Po2Wx5';
const KEY_B = 'key-bob-Po3Rt6';
const apiKey = { type: 'api_key' as const, placement: 'header' as const, name: 'Authorization', value_prefix: 'Bearer ' };
const peer = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' } }));
let everything: EverythingServer;

interface Seat {
  t: TestApp;
  org: SeededOrg;
  memberToken: string;
  memberId: string;
}

async function seat(t: TestApp): Promise<Seat> {
  const org = await t.factories.org();
  const memberId = await t.factories.member(org.orgId);
  return { t, org, memberId, memberToken: await t.factories.token(org.orgId, memberId) };
}

/** A connection of the seat's member to `slug` (key or none), and an MCP server over all their connections. */
const connect = (s: Seat, slug: string, apiKeyValue?: string) => connectMember(s.t, { token: s.memberToken, org: s.org.orgId }, slug, apiKeyValue || undefined);

const mint = (s: Seat, name: string) => mintMcpServer(s.t, { token: s.memberToken, org: s.org.orgId }, { name });

let rpcId = 0;
/** One `tools/call` POSTed to the endpoint; answers the JSON-RPC result. */
async function call(t: TestApp, server: { id: string; token: string }, name: string, args: Record<string, unknown> = {}) {
  rpcId += 1;
  const res = await fetch(`${t.url}/mcp/${server.id}`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${server.token}`,
      'MCP-Protocol-Version': '2025-11-25',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: rpcId, method: 'tools/call', params: { name, arguments: args } }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { result: { content: { type: string; text: string }[]; structuredContent?: Record<string, unknown>; isError?: boolean } };
  return body.result;
}

const initializes = (credential: string) => peer.peer.seen.filter((r) => r.rpc === 'initialize' && r.credential === credential).length;

describe('with the default idle time', () => {
  let t: TestApp;
  let alice: Seat;
  let bob: Seat;
  let crm: string;
  let every: string;
  let aliceCrm: string;
  let serverA: { id: string; token: string };
  let serverB: { id: string; token: string };

  beforeAll(async () => {
    everything = await startEverythingServer('streamableHttp');
    t = await startTestApp();
    alice = await seat(t);
    bob = { t, org: alice.org, memberId: await t.factories.member(alice.org.orgId), memberToken: '' };
    bob.memberToken = await t.factories.token(alice.org.orgId, bob.memberId);
    crm = await customConnector(t, alice.org.orgId, { slug: 'crm', name: 'Acme CRM', mcp_url: peer.peer.url, auth: apiKey });
    every = await customConnector(t, alice.org.orgId, { slug: 'every', name: 'Everything', mcp_url: everything.url, auth: { type: 'none' } });
    aliceCrm = await connect(alice, crm, KEY_A);
    await connect(alice, every);
    await connect(bob, crm, KEY_B);
    serverA = await mint(alice, 'Alice');
    serverB = await mint(bob, 'Bob');
  }, 60_000);
  afterAll(async () => {
    await t.close();
    await everything.close();
  });

  it('opens one upstream session for many calls, and one for concurrent first calls', async () => {
    const before = initializes(KEY_B);
    // Bob's first calls arrive together: they share one connect.
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => call(t, serverB, 'crm__echo', { text: `b${i}` })));
    expect(results.map((r) => r.content[0]?.text)).toEqual(['b0', 'b1', 'b2', 'b3', 'b4', 'b5']);
    for (let i = 0; i < 5; i += 1) expect((await call(t, serverB, 'crm__whoami')).structuredContent).toMatchObject({ member: 'bob', credential: KEY_B });
    expect(initializes(KEY_B) - before).toBe(1);
    // Each member's calls keep their own session and their own key.
    expect((await call(t, serverA, 'crm__whoami')).structuredContent).toMatchObject({ member: 'alice', credential: KEY_A });
    const tools = peer.peer.seen.filter((r) => r.rpc === 'tools/call');
    expect(tools.filter((r) => r.member === 'bob').every((r) => r.credential === KEY_B)).toBe(true);
    expect(tools.filter((r) => r.member === 'alice').every((r) => r.credential === KEY_A)).toBe(true);
  });

  it('opens a new session once the connection’s key is rotated, and never sends the old key again', async () => {
    expect((await call(t, serverA, 'crm__whoami')).structuredContent).toMatchObject({ credential: KEY_A });
    const opened = initializes(KEY_A2);
    peer.peer.setKeys({ [KEY_A]: 'alice', [KEY_A2]: 'alice', [KEY_B]: 'bob' });
    const member = connectionClient(t, { token: alice.memberToken, org: alice.org.orgId });
    expect((await member.reconnect(aliceCrm, { api_key: KEY_A2 })).status).toBe(200);
    const seenBefore = peer.peer.seen.length;
    for (let i = 0; i < 3; i += 1) expect((await call(t, serverA, 'crm__whoami')).structuredContent).toMatchObject({ member: 'alice', credential: KEY_A2 });
    expect(initializes(KEY_A2) - opened).toBeGreaterThanOrEqual(1);
    // The reconnect checked the key once with a session of its own; the calls opened exactly one more.
    expect(peer.peer.seen.slice(seenBefore).filter((r) => r.rpc === 'initialize')).toHaveLength(1);
    expect(peer.peer.seen.slice(seenBefore).some((r) => r.credential === KEY_A)).toBe(false);
  });

  it('survives an upstream that restarts and forgets its sessions', async () => {
    const first = await call(t, serverA, 'every__echo', { message: 'before' });
    expect(first.isError).toBeFalsy();
    expect(first.content[0]?.text).toContain('before');
    const { port } = everything;
    await everything.close();
    everything = await startEverythingServer('streamableHttp', { port });
    const after = await call(t, serverA, 'every__echo', { message: 'after' });
    expect(after.isError).toBeFalsy();
    expect(after.content[0]?.text).toContain('after');
  }, 30_000);

  it('reaches an upstream again after it cut every connection and came back', async () => {
    expect((await call(t, serverB, 'crm__echo', { text: 'one' })).content[0]?.text).toBe('one');
    peer.peer.down('close');
    const down = await call(t, serverB, 'crm__echo', { text: 'two' });
    expect(down.isError).toBe(true);
    peer.peer.up();
    expect((await call(t, serverB, 'crm__echo', { text: 'three' })).content[0]?.text).toBe('three');
  });

  it('answers a tool error at the deadline while the upstream hangs, leaves no connection behind, and calls through again once it answers', async () => {
    expect((await call(t, serverB, 'crm__echo', { text: 'before' })).content[0]?.text).toBe('before');
    const open = peer.peer.openConnections();
    const outbound = t.deps.config.outbound as { timeoutMs: number };
    const saved = outbound.timeoutMs;
    outbound.timeoutMs = 700;
    peer.peer.down('hang');
    try {
      for (let i = 0; i < 3; i += 1) {
        const hung = await call(t, serverB, 'crm__echo', { text: `hung ${i}` });
        expect(hung.isError).toBe(true);
        expect(hung.content[0]?.text).toContain('No answer within 0.7 seconds');
      }
      // Each call that gave up closed its connection: the hanging upstream is not left holding sockets.
      for (let i = 0; i < 100 && peer.peer.openConnections() > open; i += 1) await new Promise((r) => setTimeout(r, 50));
      expect(peer.peer.openConnections()).toBeLessThanOrEqual(open);
    } finally {
      outbound.timeoutMs = saved;
      peer.peer.up();
    }
    expect((await call(t, serverB, 'crm__echo', { text: 'after' })).content[0]?.text).toBe('after');
    expect(t.deps.mcp.upstream.size).toBeLessThanOrEqual(3);
  }, 30_000);
});

describe('with a short idle time', () => {
  let t: TestApp;
  let alice: Seat;
  let server: { id: string; token: string };

  beforeAll(async () => {
    t = await startTestApp({ env: { UPSTREAM_MCP_IDLE_MS: '100' } });
    alice = await seat(t);
    const crm = await customConnector(t, alice.org.orgId, { slug: 'crm', name: 'Acme CRM', mcp_url: peer.peer.url, auth: apiKey });
    await connect(alice, crm, KEY_B);
    server = await mint(alice, 'Idle');
  }, 60_000);
  afterAll(() => t.close());

  it('closes a session left idle and opens a new one for the next call', async () => {
    expect((await call(t, server, 'crm__echo', { text: 'x' })).content[0]?.text).toBe('x');
    const opened = initializes(KEY_B);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect((await call(t, server, 'crm__echo', { text: 'y' })).content[0]?.text).toBe('y');
    expect(initializes(KEY_B) - opened).toBe(1);
  });

  it('still sends every request of a kept session through the outbound guard', async () => {
    const outbound = t.deps.config.outbound as { allowLoopback: boolean };
    expect((await call(t, server, 'crm__echo', { text: 'kept' })).content[0]?.text).toBe('kept');
    outbound.allowLoopback = false;
    try {
      const refused = await call(t, server, 'crm__echo', { text: 'refused' });
      expect(refused.isError).toBe(true);
      expect(refused.content[0]?.text).toContain('could not be reached');
    } finally {
      outbound.allowLoopback = true;
    }
    expect((await call(t, server, 'crm__echo', { text: 'again' })).content[0]?.text).toBe('again');
  });
});

describe('a connection that breaks under a call, and idle connections', () => {
  const KEY = 'key-carol-Po4Kv7';
  /** Runs of each tool the upstream started; `cutOnce` makes the next run cut every connection before it answers. */
  const runs = new Map<string, number>();
  let cutOnce = false;
  const breaking = (name: string, annotations?: { readOnlyHint?: boolean; idempotentHint?: boolean }) => ({
    name,
    ...(annotations ? { annotations } : {}),
    call: () => {
      runs.set(name, (runs.get(name) ?? 0) + 1);
      if (cutOnce) {
        cutOnce = false;
        flaky.peer.cut();
      }
      return { content: [{ type: 'text' as const, text: `${name} done` }] };
    },
  });
  // JSON answers: nothing of the answer is sent before the tool has run, so the cut comes before any of it.
  const flaky = useUpstream(() =>
    startApiKeyUpstream({
      keys: { [KEY]: 'carol' },
      jsonResponse: true,
      keepAliveTimeoutMs: 3_000,
      tools: [breaking('charge'), breaking('lookup', { readOnlyHint: true }), breaking('upsert', { idempotentHint: true })],
    }),
  );
  let t: TestApp;
  let server: { id: string; token: string };
  const calls = (rpc: string) => flaky.peer.seen.filter((r) => r.rpc === rpc).length;

  beforeAll(async () => {
    t = await startTestApp();
    const carol = await seat(t);
    const shop = await customConnector(t, carol.org.orgId, { slug: 'shop', name: 'Shop', mcp_url: flaky.peer.url, auth: apiKey });
    await connect(carol, shop, KEY);
    server = await mint(carol, 'Carol');
  }, 60_000);
  afterAll(() => t.close());

  it('does not run a call twice when the connection broke after the upstream may have received it', async () => {
    expect((await call(t, server, 'shop__charge')).content[0]?.text).toBe('charge done');
    cutOnce = true;
    const broken = await call(t, server, 'shop__charge');
    expect(broken.isError).toBe(true);
    expect(broken.content[0]?.text).toContain('Shop could not be reached');
    expect(runs.get('charge')).toBe(2);
    // The next call opens a fresh session and runs once.
    expect((await call(t, server, 'shop__charge')).content[0]?.text).toBe('charge done');
    expect(runs.get('charge')).toBe(3);
  });

  it('sends a read-only or idempotent tool’s call again in a fresh session', async () => {
    for (const name of ['lookup', 'upsert']) {
      expect((await call(t, server, `shop__${name}`)).content[0]?.text).toBe(`${name} done`);
      const opened = calls('initialize');
      cutOnce = true;
      const again = await call(t, server, `shop__${name}`);
      expect(again.isError).toBeFalsy();
      expect(again.content[0]?.text).toBe(`${name} done`);
      expect(runs.get(name)).toBe(3);
      expect(calls('initialize') - opened).toBe(1);
    }
  });

  it('closes an idle connection before the upstream’s announced keep-alive timeout, and keeps the session', async () => {
    expect((await call(t, server, 'shop__lookup')).content[0]?.text).toBe('lookup done');
    const opened = calls('initialize');
    expect(flaky.peer.openConnections()).toBeGreaterThan(0);
    // `Keep-Alive: timeout=3`: the client lets an idle connection go a second before (the upstream would at 3 s).
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(flaky.peer.openConnections()).toBe(0);
    expect((await call(t, server, 'shop__lookup')).content[0]?.text).toBe('lookup done');
    expect(calls('initialize')).toBe(opened);
  });
});

/**
 * A hand-written Streamable HTTP upstream, for what the SDK's server does not do on its own
 * over one POST: answering `tools/call` as an event stream that carries progress, a log
 * notification, and requests of its own (`ping`, `sampling/createMessage`) it waits to hear
 * answered (on POSTs of their own) before it sends the result. Keeps a session id; records
 * every request.
 */
interface ScriptedRequest {
  method: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown> | null;
}

/** Calls of the `slow` tool it waits for before answering any. */
const SLOW = 24;

/** Pings the `flood` tool puts in one event stream. */
const FLOOD = 300;

/** Past the endpoint's cap on an upstream answer (8 MiB). */
const HUGE = 'y'.repeat(8.5 * 1024 * 1024);

async function startScriptedUpstream(redirectTo: () => string) {
  const seen: ScriptedRequest[] = [];
  const answers = new Map<string, (message: Record<string, unknown>) => void>();
  const answerTo = (id: string) =>
    new Promise<Record<string, unknown>>((resolve) => {
      answers.set(id, resolve);
    });
  let sessions = 0;
  /** The `flood` tool's pings: answers being received (not yet answered) now, at most at once, and in all. */
  const flood: { inFlight: number; maxInFlight: number; answered: number; emitted: boolean; maxSlow?: number } = {
    inFlight: 0,
    maxInFlight: 0,
    answered: 0,
    emitted: false,
  };
  let releaseHeld: Array<() => void> = [];
  let waitingSlow = 0;
  const slowHeld: Array<() => void> = [];
  const server = http.createServer((req, res) => {
    void (async () => {
      const text = req.method === 'POST' ? await readBody(req) : '';
      const body = text ? (JSON.parse(text) as Record<string, unknown>) : null;
      seen.push({ method: req.method ?? '', headers: req.headers, body });
      if (req.method === 'DELETE') return void res.writeHead(200).end();
      if (req.method !== 'POST' || !body) return void res.writeHead(405, { allow: 'POST, DELETE' }).end();
      if (body.method === undefined && String(body.id).startsWith('flood-')) {
        flood.inFlight += 1;
        flood.maxInFlight = Math.max(flood.maxInFlight, flood.inFlight);
        // Held until every ping is out, so that answers sent in parallel are seen together.
        if (!flood.emitted) await new Promise<void>((resolve) => releaseHeld.push(resolve));
        await new Promise((resolve) => setTimeout(resolve, 5));
        flood.inFlight -= 1;
        flood.answered += 1;
        return void res.writeHead(202).end();
      }
      if (body.method === undefined) {
        answers.get(String(body.id))?.(body);
        return void res.writeHead(202).end();
      }
      if (body.id === undefined) return void res.writeHead(202).end();
      const id = body.id;
      const params = (body.params ?? {}) as { name?: string; _meta?: { progressToken?: string | number } };
      if (body.method === 'initialize') {
        sessions += 1;
        return sendJson(
          res,
          200,
          { jsonrpc: '2.0', id, result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'scripted', version: '1.0.0' } } },
          { 'mcp-session-id': `scripted-${sessions}` },
        );
      }
      if (body.method === 'tools/list') {
        const schema = { type: 'object', properties: {} };
        return sendJson(res, 200, {
          jsonrpc: '2.0',
          id,
          result: { tools: ['stream', 'moved', 'hang', 'huge', 'malformed', 'odd_flag', 'flood', 'slow'].map((name) => ({ name, inputSchema: schema })) },
        });
      }
      if (body.method !== 'tools/call') return sendJson(res, 200, { jsonrpc: '2.0', id, error: { code: -32601, message: 'Method not found' } });
      if (params.name === 'moved') return void res.writeHead(307, { location: redirectTo() }).end();
      if (params.name === 'huge') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"text","text":"${HUGE}"}]}}`);
      }
      // Results no MCP client reads: a content type that does not exist, an isError that is not a boolean.
      if (params.name === 'malformed') return sendJson(res, 200, { jsonrpc: '2.0', id, result: { content: [{ type: 'html', html: '<b>hi</b>' }] } });
      if (params.name === 'odd_flag') return sendJson(res, 200, { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'ok' }], isError: 'no' } });
      if (params.name === 'hang') return void res.writeHead(200, { 'content-type': 'text/event-stream' }).write(': working\n\n');
      if (params.name === 'slow') {
        // Answers once SLOW calls are in at once (or after a second): calls a client sends together arrive together.
        waitingSlow += 1;
        flood.maxSlow = Math.max(flood.maxSlow ?? 0, waitingSlow);
        if (waitingSlow >= SLOW) for (const release of slowHeld.splice(0)) release();
        else await new Promise<void>((resolve) => slowHeld.push(resolve) && setTimeout(resolve, 1000).unref());
        waitingSlow -= 1;
        return sendJson(res, 200, { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'slow' }] } });
      }
      if (params.name === 'flood') {
        // FLOOD pings in one event stream, each asking for an answer (a request of the client's own).
        Object.assign(flood, { inFlight: 0, maxInFlight: 0, answered: 0, emitted: false });
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        for (let i = 0; i < FLOOD; i += 1) res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: `flood-${i}`, method: 'ping' })}\n\n`);
        flood.emitted = true;
        for (const release of releaseHeld) release();
        releaseHeld = [];
        // Until the answers stop coming (the client answers only so many), then the result.
        let seen = 0;
        for (let waited = 0; waited < 5000; waited += 200) {
          await new Promise((resolve) => setTimeout(resolve, 200));
          const now = flood.answered + flood.inFlight;
          if (now > 0 && now === seen && flood.inFlight === 0) break;
          seen = now;
        }
        return void res.end(`data: ${JSON.stringify({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'flooded' }] } })}\n\n`);
      }
      // `stream`: events in CRLF and LF, one of them split across two writes.
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const token = params._meta?.progressToken;
      const event = (message: unknown, eol = '\n') => res.write(`event: message${eol}data: ${JSON.stringify(message)}${eol}${eol}`);
      if (token !== undefined)
        event({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress: 1, total: 2, message: 'asked' } }, '\r\n');
      event({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'not for the caller' } });
      res.write(': a comment\n\n');
      const pong = answerTo('srv-ping');
      const sampled = answerTo('srv-sample');
      event({ jsonrpc: '2.0', id: 'srv-ping', method: 'ping' });
      event({ jsonrpc: '2.0', id: 'srv-sample', method: 'sampling/createMessage', params: { messages: [], maxTokens: 1 } });
      const replies = await Promise.race([Promise.all([pong, sampled]), new Promise<null>((resolve) => setTimeout(() => resolve(null), 5000).unref())]);
      if (token !== undefined)
        event({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress: 2, total: 2, message: 'answered' } });
      const result = `data: ${JSON.stringify({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: JSON.stringify(replies) }], structuredContent: { replies } } })}\n\n`;
      res.write(result.slice(0, 25));
      setTimeout(() => res.end(result.slice(25)), 20);
    })().catch(() => res.destroy());
  });
  const origin = await listen(server);
  return { url: `${origin}/mcp`, seen, flood, close: () => closeServer(server) };
}

/** `tools/call` POSTed with a progressToken: the endpoint answers an event stream; its messages in order. */
async function streamedCall(t: TestApp, server: { id: string; token: string }, name: string) {
  rpcId += 1;
  const res = await fetch(`${t.url}/mcp/${server.id}`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${server.token}`,
      'MCP-Protocol-Version': '2025-11-25',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: rpcId, method: 'tools/call', params: { name, arguments: {}, _meta: { progressToken: `p-${rpcId}` } } }),
  });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
  const text = await res.text();
  return text
    .split(/\n\n/)
    .map((block) =>
      block
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim())
        .join('\n'),
    )
    .filter(Boolean)
    .map(
      (data) =>
        JSON.parse(data) as {
          id?: number;
          method?: string;
          params?: Record<string, unknown>;
          result?: { content: { text: string }[]; structuredContent?: Record<string, unknown>; isError?: boolean };
        },
    );
}

describe('the pooled session’s own client', () => {
  let t: TestApp;
  let alice: Seat;
  let scripted: Awaited<ReturnType<typeof startScriptedUpstream>>;
  let server: { id: string; token: string };

  beforeAll(async () => {
    scripted = await startScriptedUpstream(() => `${peer.peer.url}?from=redirect`);
    t = await startTestApp();
    alice = await seat(t);
    const script = await customConnector(t, alice.org.orgId, { slug: 'script', name: 'Scripted', mcp_url: scripted.url, auth: { type: 'none' } });
    const crm = await customConnector(t, alice.org.orgId, { slug: 'crm', name: 'Acme CRM', mcp_url: peer.peer.url, auth: apiKey });
    await connect(alice, script);
    await connect(alice, crm, KEY_A);
    server = await mint(alice, 'Lean');
  }, 60_000);
  let closed = false;
  afterAll(async () => {
    if (!closed) await t.close();
    await scripted.close();
  });

  it('reads a tools/call answered as events: progress relayed, the upstream’s own requests answered, the session kept', async () => {
    const messages = await streamedCall(t, server, 'script__stream');
    const progress = messages.filter((m) => m.method === 'notifications/progress');
    expect(progress.map((m) => m.params)).toEqual([
      { progressToken: `p-${rpcId}`, progress: 1, total: 2, message: 'asked' },
      { progressToken: `p-${rpcId}`, progress: 2, total: 2, message: 'answered' },
    ]);
    // The log notification was the upstream's business with us, not the caller's.
    expect(messages.some((m) => m.method === 'notifications/message')).toBe(false);
    const last = messages[messages.length - 1];
    expect(last?.id).toBe(rpcId);
    expect(last?.result?.isError).toBeFalsy();
    expect(last?.result?.structuredContent).toEqual({
      replies: [
        { jsonrpc: '2.0', id: 'srv-ping', result: {} },
        { jsonrpc: '2.0', id: 'srv-sample', error: { code: -32601, message: 'Method not found' } },
      ],
    });
    // One session: its id and the negotiated version on every request after initialize.
    const posts = scripted.seen.filter((r) => r.method === 'POST');
    const opened = posts.filter((r) => r.body?.method === 'initialize');
    const session = opened[opened.length - 1]!;
    const after = posts.slice(posts.indexOf(session) + 1);
    expect(after.map((r) => r.body?.method ?? `answer ${String(r.body?.id)}`).sort()).toEqual(
      ['answer srv-ping', 'answer srv-sample', 'notifications/initialized', 'tools/call'].sort(),
    );
    for (const r of after) {
      expect(r.headers['mcp-session-id']).toBe(`scripted-${opened.length}`);
      expect(r.headers['mcp-protocol-version']).toBe('2025-06-18');
      expect(r.headers['user-agent']).toBe('mcp-control-plane/0.1');
    }
    const sent = after.find((r) => r.body?.method === 'tools/call')!;
    expect(sent.body?.params).toMatchObject({ name: 'stream', arguments: {}, _meta: { progressToken: expect.any(Number) } });
    // Without a progressToken the call asks for none and still gets its result.
    const plain = await call(t, server, 'script__stream');
    expect(plain.isError).toBeFalsy();
    expect(scripted.seen.filter((r) => r.body?.method === 'initialize')).toHaveLength(opened.length);
    const lastCall = scripted.seen.filter((r) => r.body?.method === 'tools/call').pop()!;
    expect((lastCall.body?.params as { _meta?: unknown })._meta).toBeUndefined();
  }, 20_000);

  it('answers an upstream’s flood of its own requests four at a time, and lets those past a bounded queue go', async () => {
    const result = await call(t, server, 'script__flood');
    expect(result.content[0]?.text).toBe('flooded');
    const { maxInFlight, answered } = scripted.flood;
    // Counted at the upstream: answers it was receiving at once, and in all.
    expect(maxInFlight).toBeGreaterThan(0);
    expect(maxInFlight).toBeLessThanOrEqual(4);
    expect(answered).toBeLessThan(FLOOD);
  }, 30_000);

  it('sends one connection’s calls over at most 16 connections to the upstream, the rest waiting their turn', async () => {
    scripted.flood.maxSlow = 0;
    const results = await Promise.all(Array.from({ length: SLOW }, () => call(t, server, 'script__slow')));
    expect(results.every((r) => r.content[0]?.text === 'slow')).toBe(true);
    // Counted at the upstream: calls it was holding at once (each on a connection of its own).
    expect(scripted.flood.maxSlow).toBeGreaterThan(1);
    expect(scripted.flood.maxSlow).toBeLessThanOrEqual(16);
  }, 30_000);

  it('turns a result no MCP client could read into a tool error, and keeps the session', async () => {
    const opened = scripted.seen.filter((r) => r.body?.method === 'initialize').length;
    for (const [name, problem] of [
      ['malformed', /content\[0\] is of no known type/],
      ['odd_flag', /isError is not a boolean/],
    ] as const) {
      const result = await call(t, server, `script__${name}`);
      expect(result.isError).toBe(true);
      expect(result.content[0]?.text).toContain('Scripted could not be reached or did not answer');
      // The operator's detail is in the tool-call record, written off the answer's path (asked again for up to 5 s).
      const record = () =>
        t.db
          .selectFrom('tool_call_records')
          .select(['outcome', 'error'])
          .where('mcp_server_id', '=', server.id)
          .where('tool_name', '=', `script__${name}`)
          .executeTakeFirst();
      let row = await record();
      for (let i = 0; !row && i < 100; i += 1) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        row = await record();
      }
      expect(row?.outcome).toBe('unavailable');
      expect(row?.error).toMatch(problem);
    }
    expect((await call(t, server, 'script__stream')).isError).toBeFalsy();
    expect(scripted.seen.filter((r) => r.body?.method === 'initialize').length).toBe(opened);
  });

  it('does not follow a redirect', async () => {
    const before = peer.peer.seen.length;
    const moved = await call(t, server, 'script__moved');
    expect(moved.isError).toBe(true);
    expect(moved.content[0]?.text).toContain('could not be reached or did not answer');
    expect(peer.peer.seen.slice(before).some((r) => r.path.includes('from=redirect'))).toBe(false);
  });

  it('refuses an answer past the byte cap', async () => {
    const huge = await call(t, server, 'script__huge');
    expect(huge.isError).toBe(true);
    expect(huge.content[0]?.text).toContain('larger than this server reads');
    // The cap is per answer: the session's next call is read as usual.
    expect((await call(t, server, 'script__stream')).isError).toBeFalsy();
  }, 20_000);

  it('refuses a private address the policy forbids, before any request reaches it', async () => {
    const outbound = t.deps.config.outbound as { allowLoopback: boolean };
    const bob = await seat(t);
    const crm = await customConnector(t, bob.org.orgId, { slug: 'crm', name: 'Acme CRM', mcp_url: peer.peer.url, auth: apiKey });
    await connect(bob, crm, KEY_B);
    const bobServer = await mint(bob, 'Bob');
    const before = peer.peer.seen.length;
    outbound.allowLoopback = false;
    try {
      // A fresh session (its first call) and so a fresh connection.
      const refused = await call(t, bobServer, 'crm__whoami');
      expect(refused.isError).toBe(true);
      expect(refused.content[0]?.text).toContain('could not be reached');
    } finally {
      outbound.allowLoopback = true;
    }
    expect(peer.peer.seen.length).toBe(before);
    expect((await call(t, bobServer, 'crm__whoami')).structuredContent).toMatchObject({ member: 'bob' });
  });

  /** The `tools/call` requests the scripted upstream got for `hang`, and the cancellations it heard. */
  const hangs = () => scripted.seen.filter((r) => r.body?.method === 'tools/call' && (r.body.params as { name?: string }).name === 'hang');
  const cancelledIds = () =>
    scripted.seen.filter((r) => r.body?.method === 'notifications/cancelled').map((r) => (r.body?.params as { requestId?: unknown }).requestId);
  async function until(check: () => boolean) {
    for (let i = 0; i < 100 && !check(); i += 1) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(check()).toBe(true);
  }

  it('tells the upstream of a call the caller cancelled (notifications/cancelled with the upstream request’s id)', async () => {
    const before = hangs().length;
    const headers = {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${server.token}`,
      'MCP-Protocol-Version': '2025-11-25',
    };
    const pending = fetch(`${t.url}/mcp/${server.id}`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: 'hang-1', method: 'tools/call', params: { name: 'script__hang', arguments: {} } }),
    });
    await until(() => hangs().length > before);
    const cancel = await fetch(`${t.url}/mcp/${server.id}`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'hang-1', reason: 'user' } }),
    });
    expect(cancel.status).toBe(202);
    const answered = await pending;
    expect(await answered.json()).toMatchObject({ id: 'hang-1', result: { isError: true, content: [{ type: 'text', text: 'The call was cancelled.' }] } });
    const upstreamId = hangs()[before]!.body?.id;
    await until(() => cancelledIds().includes(upstreamId));
    // The session goes on.
    expect((await call(t, server, 'script__stream')).isError).toBeFalsy();
  }, 20_000);

  it('gives up at the outbound deadline and tells the upstream so', async () => {
    const outbound = t.deps.config.outbound as { timeoutMs: number };
    const before = hangs().length;
    const saved = outbound.timeoutMs;
    outbound.timeoutMs = 500;
    try {
      const late = await call(t, server, 'script__hang');
      expect(late.isError).toBe(true);
      expect(late.content[0]?.text).toContain('No answer within 0.5 seconds');
    } finally {
      outbound.timeoutMs = saved;
    }
    const upstreamId = hangs()[before]!.body?.id;
    await until(() => cancelledIds().includes(upstreamId));
  }, 20_000);

  it('ends the upstream session (DELETE with its id) when the app closes', async () => {
    const opened = scripted.seen.filter((r) => r.body?.method === 'initialize').length;
    closed = true;
    await t.close();
    const deleted = scripted.seen.filter((r) => r.method === 'DELETE');
    expect(deleted.map((r) => r.headers['mcp-session-id'])).toContain(`scripted-${opened}`);
  }, 30_000);
});
