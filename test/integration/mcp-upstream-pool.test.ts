import { startTestApp, type TestApp } from '../support/app';
import { connectionClient } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { startApiKeyUpstream, startEverythingServer, useUpstream, type EverythingServer } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';

/*
 * The upstream MCP sessions the endpoint `/mcp/{mcpId}` keeps per connection and credential
 * (src/lib/mcp-upstream-pool.ts), seen from the upstreams: the API-key peer records every
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
async function connect(s: Seat, slug: string, apiKeyValue?: string): Promise<string> {
  const member = connectionClient(s.t, { token: s.memberToken, org: s.org.orgId });
  const created = await member.create({ connector_slug: slug, ...(apiKeyValue ? { api_key: apiKeyValue } : {}) });
  expect(created.status).toBe(201);
  return created.body.id as string;
}

async function mint(s: Seat, name: string) {
  const res = await s.t.as({ token: s.memberToken, org: s.org.orgId }).post('/user-toolbox/utbx_dyn_all/mcp', { name });
  expect(res.status).toBe(201);
  return { id: res.body.mcp_server.id as string, token: res.body.token as string };
}

let rpcId = 0;
/** One `tools/call` POSTed to the endpoint; answers the JSON-RPC result. */
async function call(t: TestApp, server: { id: string; token: string }, name: string, args: Record<string, unknown> = {}) {
  rpcId += 1;
  const res = await fetch(`${t.url}/mcp/${server.id}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${server.token}`, 'MCP-Protocol-Version': '2025-11-25' },
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
