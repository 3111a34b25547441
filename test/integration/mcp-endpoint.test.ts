import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { connectionClient } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { startApiKeyUpstream, startEverythingServer, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';
import { insertToolbox } from '../fixtures/user-toolboxes';
import { connectMember, memberWithToken, mintMcpServer } from '../support/mcp';

/*
 * The MCP endpoint `/mcp/{mcpId}` with the MCP SDK's own client over Streamable HTTP, against
 * real upstreams on loopback: an API-key upstream (whoami tells whose key reached it) and
 * server-everything (progress, content types). MCP servers are minted by their owners through
 * the API (createMcpServer), which shows each token once.
 */

const KEY_A = 'key-alice-Mc7Qw2';
const KEY_B = 'key-bob-Mc9Lp4';
const BIG = 'x'.repeat(600_000);
const crmPeer = useUpstream(() =>
  startApiKeyUpstream({
    keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' },
    tools: [
      { name: 'fails', description: 'Always fails.', call: () => ({ isError: true, content: [{ type: 'text', text: 'upstream says no' }] }) },
      {
        name: 'slow',
        description: 'Answers after 10 s.',
        call: () => new Promise((resolve) => setTimeout(() => resolve({ content: [{ type: 'text', text: 'late' }] }), 10_000).unref()),
      },
      { name: 'big', description: 'A large result.', call: () => ({ content: [{ type: 'text', text: BIG }] }) },
      { name: 'delete_record', description: 'Deletes a record.' },
      { name: 'drop_all', description: 'Drops everything.' },
    ],
  }),
);
const everything = useUpstream(() => startEverythingServer('streamableHttp'));

let t: TestApp;
let org: SeededOrg;
let aliceId: string;
let bobId: string;
let crm: string;
let serverA: { id: string; token: string };
let serverB: { id: string; token: string };

const memberTokens = new Map<string, string>();

/** An MCP server minted by its owner through the API (createMcpServer): its token is shown once. */
const mint = (orgId: string, ownerUserId: string, userToolboxId: string, name: string) =>
  mintMcpServer(t, { token: memberTokens.get(ownerUserId) as string, org: orgId }, { userToolboxId, name });

const endpoint = (id: string) => `${t.url}/mcp/${id}`;

async function connect(server: { id: string; token: string }, version?: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(endpoint(server.id)), { requestInit: { headers: { Authorization: `Bearer ${server.token}` } } });
  const client = new Client({ name: 'test-client', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  if (version) expect(client.getServerVersion()).toBeDefined();
  return client;
}

const post = (id: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(endpoint(id), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

const textOf = (result: CallToolResult) => (result.content[0] as { text: string }).text;

/**
 * The server's tool-call records once `ready` holds for them: they are written after the
 * answer is sent, so a test reads them by asking again (every 50 ms, for at most 10 s).
 */
async function recordsOf(serverId: string, ready: (rows: Awaited<ReturnType<typeof readRecords>>) => boolean) {
  for (let i = 0; ; i += 1) {
    const rows = await readRecords(serverId);
    if (ready(rows) || i >= 200) return rows;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
const readRecords = (serverId: string) =>
  t.db.selectFrom('tool_call_records').selectAll().where('mcp_server_id', '=', serverId).orderBy('created_at').execute();

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  aliceId = await t.factories.member(org.orgId);
  bobId = await t.factories.member(org.orgId);
  memberTokens.set(aliceId, await t.factories.token(org.orgId, aliceId));
  memberTokens.set(bobId, await t.factories.token(org.orgId, bobId));
  const alice = connectionClient(t, { token: memberTokens.get(aliceId) as string, org: org.orgId });
  const bob = connectionClient(t, { token: memberTokens.get(bobId) as string, org: org.orgId });
  const apiKey = { type: 'api_key' as const, placement: 'header' as const, name: 'Authorization', value_prefix: 'Bearer ' };
  crm = await customConnector(t, org.orgId, { slug: 'crm', name: 'Acme CRM', mcp_url: `${new URL(crmPeer.peer.url).origin}/mcp`, auth: apiKey });
  const everythingSlug = await customConnector(t, org.orgId, { slug: 'every', name: 'Everything', mcp_url: everything.peer.url, auth: { type: 'none' } });
  expect((await alice.create({ connector_slug: crm, api_key: KEY_A })).status).toBe(201);
  expect((await alice.create({ connector_slug: everythingSlug })).status).toBe(201);
  expect((await bob.create({ connector_slug: crm, api_key: KEY_B })).status).toBe(201);
  serverA = await mint(org.orgId, aliceId, 'utbx_dyn_all', 'Alice all');
  serverB = await mint(org.orgId, bobId, 'utbx_dyn_all', 'Bob all');
}, 60_000);
afterAll(() => t.close());

describe('the MCP SDK client', () => {
  it('initializes without a session, pings, lists its owner’s tools and reaches the upstream with its owner’s key', async () => {
    const client = await connect(serverA);
    try {
      expect(client.getServerVersion()).toMatchObject({ name: 'mcp-control-plane' });
      expect(client.getServerCapabilities()).toMatchObject({ tools: { listChanged: false } });
      expect((client.transport as StreamableHTTPClientTransport).sessionId).toBeUndefined();
      await client.ping();
      const names = (await client.listTools()).tools.map((tool) => tool.name);
      expect(names).toEqual(expect.arrayContaining(['crm__whoami', 'crm__echo', 'every__echo']));
      const who = (await client.callTool({ name: 'crm__whoami', arguments: {} })) as CallToolResult;
      expect(who.structuredContent).toMatchObject({ member: 'alice', credential: KEY_A });
      expect(who.isError).toBeFalsy();
    } finally {
      await client.close();
    }
    const bob = await connect(serverB);
    try {
      const names = (await bob.listTools()).tools.map((tool) => tool.name);
      expect(names).not.toContain('every__echo');
      const who = (await bob.callTool({ name: 'crm__whoami', arguments: {} })) as CallToolResult;
      expect(who.structuredContent).toMatchObject({ member: 'bob', credential: KEY_B });
    } finally {
      await bob.close();
    }
  });

  it('answers a tool it does not list with -32602 and an unknown method with -32601', async () => {
    const client = await connect(serverA);
    try {
      await expect(client.callTool({ name: 'crm__nope', arguments: {} })).rejects.toMatchObject({ code: -32602 });
      await expect(client.listResources()).rejects.toMatchObject({ code: -32601 });
    } finally {
      await client.close();
    }
  });

  it('turns upstream errors and timeouts into tool errors and passes a large result through', async () => {
    const client = await connect(serverA);
    try {
      const failed = (await client.callTool({ name: 'crm__fails', arguments: {} })) as CallToolResult;
      expect(failed).toMatchObject({ isError: true, content: [{ type: 'text', text: 'upstream says no' }] });
      const slow = (await client.callTool({ name: 'crm__slow', arguments: {} }, CallToolResultSchema, { timeout: 20_000 })) as CallToolResult;
      expect(slow.isError).toBe(true);
      expect(textOf(slow)).toMatch(/Acme CRM could not be reached or did not answer/);
      const big = (await client.callTool({ name: 'crm__big', arguments: {} })) as CallToolResult;
      expect(textOf(big)).toHaveLength(BIG.length);
    } finally {
      await client.close();
    }
  }, 30_000);

  it('passes server-everything’s content types through unchanged', async () => {
    const client = await connect(serverA);
    try {
      const direct = new Client({ name: 'direct', version: '1.0.0' });
      await direct.connect(new StreamableHTTPClientTransport(new URL(everything.peer.url)));
      try {
        const tools = (await direct.listTools()).tools.map((tool) => tool.name);
        const image = tools.find((n) => /image/i.test(n) && /get|tiny/i.test(n));
        const listed = (await client.listTools()).tools.map((tool) => tool.name);
        for (const name of [image].filter((n): n is string => n !== undefined)) {
          expect(listed).toContain(`every__${name}`);
          const through = await client.callTool({ name: `every__${name}`, arguments: {} });
          const straight = await direct.callTool({ name, arguments: {} });
          expect(through.content).toEqual(straight.content);
        }
        const echo = await client.callTool({ name: 'every__echo', arguments: { message: 'hi' } });
        expect(echo.content).toEqual((await direct.callTool({ name: 'echo', arguments: { message: 'hi' } })).content);
      } finally {
        await direct.close();
      }
    } finally {
      await client.close();
    }
  });

  it('lists each tool as the upstream describes it: title, description, schemas and annotations in MCP’s own names', async () => {
    const client = await connect(serverA);
    const direct = new Client({ name: 'direct', version: '1.0.0' });
    await direct.connect(new StreamableHTTPClientTransport(new URL(everything.peer.url)));
    try {
      const straight = (await direct.listTools()).tools;
      const through = new Map((await client.listTools()).tools.map((tool) => [tool.name, tool]));
      const annotated = straight.filter((tool) => tool.annotations && Object.keys(tool.annotations).some((key) => key.endsWith('Hint')));
      expect(annotated.length).toBeGreaterThan(0);
      for (const tool of straight.filter((t) => t.execution?.taskSupport !== 'required')) {
        const listed = through.get(`every__${tool.name}`);
        expect(listed).toBeDefined();
        const hints = Object.fromEntries(Object.entries(tool.annotations ?? {}).filter(([key]) => key.endsWith('Hint')));
        expect(listed?.annotations ?? {}).toEqual(hints);
        expect(listed?.description).toBe(tool.description);
        expect(listed?.title).toBe(tool.title ?? tool.annotations?.title);
        expect(listed?.inputSchema.properties ?? {}).toEqual(tool.inputSchema.properties ?? {});
      }
    } finally {
      await direct.close();
      await client.close();
    }
  });

  it('does not list the upstream tools that must be called as tasks (execution.taskSupport "required"), which every plain call would fail', async () => {
    const client = await connect(serverA);
    const direct = new Client({ name: 'direct', version: '1.0.0' });
    await direct.connect(new StreamableHTTPClientTransport(new URL(everything.peer.url)));
    try {
      const straight = (await direct.listTools()).tools;
      const taskOnly = straight.filter((tool) => tool.execution?.taskSupport === 'required').map((tool) => tool.name);
      expect(taskOnly.length).toBeGreaterThan(0);
      const listed = (await client.listTools()).tools.map((tool) => tool.name);
      for (const name of taskOnly) expect(listed).not.toContain(`every__${name}`);
      expect(listed.filter((name) => name.startsWith('every__')).length).toBe(straight.length - taskOnly.length);
    } finally {
      await direct.close();
      await client.close();
    }
  });

  it('relays progress as server-sent events when the client sends a progressToken', async () => {
    const client = await connect(serverA);
    try {
      const listed = (await client.listTools()).tools.map((tool) => tool.name);
      const longRunning = listed.find((n) => /long/i.test(n));
      expect(longRunning).toBeDefined();
      const seen: number[] = [];
      const result = await client.callTool({ name: longRunning as string, arguments: { duration: 1, steps: 3 } }, CallToolResultSchema, {
        onprogress: (p) => seen.push(p.progress),
        timeout: 20_000,
      });
      expect(result.isError).toBeFalsy();
      expect(seen.length).toBeGreaterThanOrEqual(2);
    } finally {
      await client.close();
    }
  }, 30_000);

  it('cancels a call when the client aborts it', async () => {
    const client = await connect(serverA);
    try {
      const controller = new AbortController();
      const call = client.callTool({ name: 'crm__slow', arguments: {} }, CallToolResultSchema, { signal: controller.signal, timeout: 20_000 });
      setTimeout(() => controller.abort('enough'), 300);
      await expect(call).rejects.toThrow();
      // The call is recorded as cancelled once the server hears of it.
      const rows = await recordsOf(serverA.id, (all) => all.some((r) => r.tool_name === 'crm__slow' && r.outcome === 'cancelled'));
      expect(rows.filter((r) => r.tool_name === 'crm__slow').map((r) => r.outcome)).toContain('cancelled');
    } finally {
      await client.close();
    }
  }, 30_000);
});

describe('policy', () => {
  it('hides a denied tool and refuses its call; a held tool answers a tool error naming the restriction', async () => {
    const admin = t.as({ token: org.token, org: org.orgId });
    const deny = await admin.post('/restriction', {
      name: 'No drops',
      match: { connector_slug: crm, tool_pattern: 'drop_*' },
      effect: 'deny',
      applies_to: { everyone: true },
    });
    expect(deny.status).toBe(201);
    const hold = await admin.post('/restriction', {
      name: 'No deletes on CRM',
      match: { connector_slug: crm, tool_pattern: 'delete_*' },
      effect: 'require_approval',
      applies_to: { everyone: true },
    });
    expect(hold.status).toBe(201);
    const client = await connect(serverA);
    try {
      const names = (await client.listTools()).tools.map((tool) => tool.name);
      expect(names).not.toContain('crm__drop_all');
      expect(names).toContain('crm__delete_record');
      await expect(client.callTool({ name: 'crm__drop_all', arguments: {} })).rejects.toMatchObject({ code: -32602 });
      const held = (await client.callTool({ name: 'crm__delete_record', arguments: {} })) as CallToolResult;
      expect(held.isError).toBe(true);
      expect(textOf(held)).toContain(`"No deletes on CRM" (${hold.body.id})`);
    } finally {
      await client.close();
    }
  });

  it('an exception covers the tools named when it was approved: broadening the restriction to `*` holds the new ones back', async () => {
    const admin = t.as({ token: org.token, org: org.orgId });
    const hold = await admin.op('createRestriction', {
      body: {
        name: 'Whoami needs approval',
        match: { connector_slug: crm, tool_pattern: 'whoami' },
        effect: 'require_approval',
        applies_to: { everyone: true },
      },
    });
    expect(hold.status).toBe(201);
    const filed = await t
      .as({ token: memberTokens.get(aliceId) as string, org: org.orgId })
      .op('createAccessRequest', { body: { restriction_id: hold.body.id, reason: 'Checking whose key is used.' } });
    expect(filed.status).toBe(201);
    const approved = await t
      .as({ session: await t.factories.session(org.ownerId), org: org.orgId })
      .op('resolveAccessRequest', { params: { id: filed.body.id }, body: { decision: 'approved' } });
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ tool_name: null, exception_connector_slug: crm, exception_tool_pattern: 'whoami' });
    const client = await connect(serverA);
    try {
      expect(((await client.callTool({ name: 'crm__whoami', arguments: {} })) as CallToolResult).isError).toBeFalsy();
      const broadened = await admin.op('updateRestriction', { params: { id: hold.body.id }, body: { match: { connector_slug: crm, tool_pattern: '*' } } });
      expect(broadened.status).toBe(200);
      // Still covered: what was approved.
      expect(((await client.callTool({ name: 'crm__whoami', arguments: {} })) as CallToolResult).isError).toBeFalsy();
      // Newly matched: held, not sent upstream (whose answer would be "upstream says no").
      const held = (await client.callTool({ name: 'crm__fails', arguments: {} })) as CallToolResult;
      expect(held.isError).toBe(true);
      expect(textOf(held)).toContain(`"Whoami needs approval" (${hold.body.id})`);
    } finally {
      await client.close();
      expect((await admin.op('deleteRestriction', { params: { id: hold.body.id } })).status).toBe(204);
    }
  });
});

describe('a connection received by transfer', () => {
  it('serves the recipient nothing until they accept it, and then never shadows the connection they made themselves', async () => {
    // An organization of its own: the connections here change hands.
    const o = await t.factories.org();
    const apiKey = { type: 'api_key' as const, placement: 'header' as const, name: 'Authorization', value_prefix: 'Bearer ' };
    const slug = await customConnector(t, o.orgId, { slug: 'acme', name: 'Acme', mcp_url: `${new URL(crmPeer.peer.url).origin}/mcp`, auth: apiKey });
    const sender = await memberWithToken(t, o.orgId);
    const recipient = await memberWithToken(t, o.orgId);
    const recipientServer = await mintMcpServer(t, recipient, { name: 'Recipient all' });
    const sendersConnection = await connectMember(t, sender, slug, KEY_A);
    const whoami = async () => {
      const client = await connect(recipientServer);
      try {
        const names = (await client.listTools()).tools.map((tool) => tool.name);
        if (!names.includes('acme__whoami')) return null;
        return textOf((await client.callTool({ name: 'acme__whoami', arguments: {} })) as CallToolResult);
      } finally {
        await client.close();
      }
    };
    // Handed over with the sender's key: nothing of it is served until accepted.
    const handed = await t.as(sender).op('transferConnection', { params: { id: sendersConnection }, body: { user_id: recipient.userId } });
    expect(handed.status).toBe(200);
    expect(handed.body).toMatchObject({ owner_user_id: recipient.userId, awaiting_acceptance: true, transferred_from_user_id: sender.userId });
    expect(await whoami()).toBeNull();
    // The recipient's own connection, made after the sender's (which is older), is the one served.
    const recipientsOwn = await connectMember(t, recipient, slug, KEY_B);
    expect(await whoami()).toBe('bob');
    const accepted = await t.as(recipient).op('acceptConnection', { params: { id: sendersConnection } });
    expect(accepted.status).toBe(200);
    expect(accepted.body.awaiting_acceptance).toBe(false);
    // Accepted, it still does not shadow the recipient's own.
    expect(await whoami()).toBe('bob');
    // Without their own, the accepted one serves them.
    expect((await t.as(recipient).op('deleteConnection', { params: { id: recipientsOwn } })).status).toBe(204);
    expect(await whoami()).toBe('alice');
  });
});

describe('an MCP server token minted by an API token', () => {
  const list = async (server: { id: string; token: string }) => {
    const res = await post(server.id, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { Authorization: `Bearer ${server.token}` });
    return {
      status: res.status,
      names: res.status === 200 ? ((await res.json()) as { result: { tools: { name: string }[] } }).result.tools.map((tool) => tool.name) : [],
    };
  };
  const callWhoami = async (server: { id: string; token: string }) => {
    const res = await post(
      server.id,
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'crm__whoami', arguments: {} } },
      { Authorization: `Bearer ${server.token}` },
    );
    return { status: res.status, body: res.status === 200 ? await res.json() : null };
  };
  const mintWith = async (token: string, name: string) => {
    const res = await t.call('POST', '/user-toolbox/utbx_dyn_all/mcp', { name }, { token, org: org.orgId });
    expect(res.status).toBe(201);
    return { id: res.body.mcp_server.id as string, token: res.body.token as string };
  };

  it('acts within that token’s permissions: no connection:use, no upstream tools', async () => {
    const narrow = await t.factories.token(org.orgId, aliceId, ['mcp_server:manage', 'mcp_server:view']);
    const server = await mintWith(narrow, 'Narrow');
    expect((await list(server)).names.filter((name) => name.startsWith('crm__'))).toEqual([]);
    expect((await callWhoami(server)).body).toMatchObject({ error: { code: -32602 } });
  });

  it('works only while that token is valid; rotating with a session moves the token to the owner', async () => {
    const token = await t.factories.token(org.orgId, aliceId, ['mcp_server:manage', 'mcp_server:view', 'connection:use']);
    const server = await mintWith(token, 'Scripted');
    expect((await callWhoami(server)).body).toMatchObject({ result: { structuredContent: { member: 'alice' } } });
    const session = await t.factories.session(aliceId);
    expect((await t.call('DELETE', `/api-token/${await t.factories.tokenId(token)}`, undefined, { session, org: org.orgId })).status).toBe(204);
    expect((await callWhoami(server)).status).toBe(401);
    const rotated = await t.call('POST', `/user-toolbox/utbx_dyn_all/mcp/${server.id}/rotate`, undefined, { session, org: org.orgId });
    expect(rotated.status).toBe(200);
    expect((await callWhoami({ id: server.id, token: rotated.body.token })).body).toMatchObject({ result: { structuredContent: { member: 'alice' } } });

    // An API token past its expiry stops the servers it minted too.
    const expiring = await t.factories.token(org.orgId, aliceId, ['mcp_server:manage', 'connection:use']);
    const other = await mintWith(expiring, 'Expiring');
    expect((await callWhoami(other)).status).toBe(200);
    await t.db
      .updateTable('api_tokens')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', await t.factories.tokenId(expiring))
      .execute();
    expect((await callWhoami(other)).status).toBe(401);
  });
});

describe('synthetic tools', () => {
  it('lists and runs a synthetic tool of a toolbox shared with the owner', async () => {
    const admin = t.as({ token: org.token, org: org.orgId });
    const created = await admin.post('/synthetic-tool', {
      name: 'greet_twice',
      description: 'Echoes twice.',
      input_schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      steps: [{ id: 'one', tool: { connector_slug: crm, name: 'echo' }, arguments: { text: { $input: '/text' } } }],
    });
    expect(created.status).toBe(201);
    const toolbox = await insertToolbox(t, org.orgId, { entries: [{ synthetic_tool_id: created.body.id }], principal: { type: 'user', id: aliceId } });
    const server = await mint(org.orgId, aliceId, `utbx_dyn_tbx_${toolbox.slice('tbx_'.length)}`, 'Alice synthetic');
    const client = await connect(server);
    try {
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(['greet_twice']);
      const result = (await client.callTool({ name: 'greet_twice', arguments: { text: 'hello' } })) as CallToolResult;
      expect(result.isError).toBe(false);
      // With a progressToken: one notifications/progress per step, then the result.
      const seen: { progress: number; total?: number; message?: string }[] = [];
      const again = await client.callTool({ name: 'greet_twice', arguments: { text: 'hello' } }, CallToolResultSchema, { onprogress: (p) => seen.push(p) });
      expect(again.isError).toBe(false);
      expect(seen).toEqual([{ progress: 1, total: 1, message: 'Step one done' }]);
    } finally {
      await client.close();
    }
  });

  it('runs a synthetic tool under the rules of executeSyntheticTool: pinned steps only as the toolbox selects, bounded arguments, a record per step', async () => {
    const admin = t.as({ token: org.token, org: org.orgId });
    const bobConn = (
      await t.db.selectFrom('connections').select('id').where('owner_user_id', '=', bobId).where('connector_slug', '=', crm).executeTakeFirstOrThrow()
    ).id;
    const pinned = async (name: string, tool: string) => {
      const res = await admin.post('/synthetic-tool', {
        name,
        description: `${tool} through Bob's connection.`,
        input_schema: { type: 'object', properties: { pad: { type: 'string' } } },
        steps: [{ id: 'call', tool: { connector_slug: crm, connection_id: bobConn, name: tool } }],
      });
      expect(res.status).toBe(201);
      return res.body.id as string;
    };
    const who = await pinned('bob_whoami', 'whoami');
    const echo = await pinned('bob_echo', 'echo');
    // Bob's connection is shared with Alice for whoami only.
    const toolbox = await insertToolbox(t, org.orgId, {
      entries: [{ connection_id: bobConn, tools: ['whoami'] }, { synthetic_tool_id: who }, { synthetic_tool_id: echo }],
      principal: { type: 'user', id: aliceId },
    });
    const server = await mint(org.orgId, aliceId, `utbx_dyn_tbx_${toolbox.slice('tbx_'.length)}`, 'Alice through Bob');
    const client = await connect(server);
    try {
      const refused = (await client.callTool({ name: 'bob_echo', arguments: {} })) as CallToolResult;
      expect(refused.isError).toBe(true);
      expect(textOf(refused)).toContain('offer only whoami');
      const ran = (await client.callTool({ name: 'bob_whoami', arguments: {} })) as CallToolResult;
      expect(ran.isError).toBe(false);
      expect(ran.structuredContent).toMatchObject({ member: 'bob', credential: KEY_B });
      const large = (await client.callTool({ name: 'bob_whoami', arguments: { pad: 'x'.repeat(300_000) } })) as CallToolResult;
      expect(large.isError).toBe(true);
      expect(textOf(large)).toContain('262144');
    } finally {
      await client.close();
    }
    const rows = await recordsOf(server.id, (r) => r.length >= 4);
    expect(rows).toHaveLength(4);
    expect(rows.map((r) => [r.tool_name, r.upstream_tool, r.connection_id, r.outcome])).toEqual(
      expect.arrayContaining([
        ['bob_echo', null, null, 'tool_error'],
        ['bob_whoami', 'whoami', bobConn, 'succeeded'],
        ['bob_whoami', null, null, 'succeeded'],
        ['bob_whoami', null, null, 'tool_error'],
      ]),
    );
    expect(rows.every((r) => r.synthetic_tool_id !== null && r.user_toolbox_id !== null)).toBe(true);
  });

  it('lists a synthetic tool whose schema has boolean properties to SDK clients, as the objects they mean', async () => {
    const admin = t.as({ token: org.token, org: org.orgId });
    const created = await admin.post('/synthetic-tool', {
      name: 'loose_echo',
      description: 'Echoes; takes anything beside the text.',
      input_schema: { type: 'object', properties: { text: { type: 'string' }, anything: true, nothing: false }, required: ['text'] },
      steps: [{ id: 'one', tool: { connector_slug: crm, name: 'echo' }, arguments: { text: { $input: '/text' } } }],
    });
    expect(created.status).toBe(201);
    const toolbox = await insertToolbox(t, org.orgId, { entries: [{ synthetic_tool_id: created.body.id }], principal: { type: 'user', id: aliceId } });
    const server = await mint(org.orgId, aliceId, `utbx_dyn_tbx_${toolbox.slice('tbx_'.length)}`, 'Alice loose');
    const client = await connect(server);
    try {
      const [tool] = (await client.listTools()).tools;
      expect(tool?.inputSchema.properties).toEqual({ text: { type: 'string' }, anything: {}, nothing: { not: {} } });
    } finally {
      await client.close();
    }
  });
});

describe('the transport, raw', () => {
  it('answers 401 with the resource_metadata challenge, and the metadata documents', async () => {
    const res = await post(serverA.id, { jsonrpc: '2.0', id: 1, method: 'ping' }, {});
    expect(res.status).toBe(401);
    const challenge = res.headers.get('www-authenticate') ?? '';
    const metadataUrl = `${t.deps.config.baseUrl}/.well-known/oauth-protected-resource/mcp/${serverA.id}`;
    expect(challenge).toContain(`resource_metadata="${metadataUrl}"`);
    expect(await res.json()).toMatchObject({ error: 'invalid_token' });
    // A client that probes with GET before it has a token hears the same challenge, not the 405.
    const probe = await fetch(endpoint(serverA.id), { headers: { Accept: 'text/event-stream' } });
    expect(probe.status).toBe(401);
    expect(probe.headers.get('www-authenticate')).toContain(`resource_metadata="${metadataUrl}"`);
    const wrong = await post(serverA.id, { jsonrpc: '2.0', id: 1, method: 'ping' }, { Authorization: 'Bearer mcpt_nothing' });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('www-authenticate')).toContain('error="invalid_token"');
    const doc = await fetch(metadataUrl.replace(t.deps.config.baseUrl, t.url));
    expect(doc.status).toBe(200);
    expect(await doc.json()).toEqual({
      resource: `${t.deps.config.baseUrl}/mcp/${serverA.id}`,
      authorization_servers: [t.deps.config.baseUrl],
      scopes_supported: ['mcp'],
      bearer_methods_supported: ['header'],
      resource_name: 'MCP control plane',
      resource_documentation: `${t.deps.config.baseUrl}/schema/openapi.json`,
    });
    expect((await fetch(`${t.url}/.well-known/oauth-protected-resource/mcp/${newId('mcpServer')}`)).status).toBe(404);
    const root = await fetch(`${t.url}/.well-known/oauth-protected-resource`);
    expect(root.status).toBe(200);
    expect(await root.json()).toMatchObject({ resource: t.deps.config.baseUrl });
  });

  it('publishes a metadata document that names no MCP server: anyone with the id reads it, from any origin', async () => {
    const doc = await fetch(`${t.url}/.well-known/oauth-protected-resource/mcp/${serverA.id}`, { headers: { Origin: 'https://anyone.example' } });
    expect(doc.status).toBe(200);
    expect(doc.headers.get('access-control-allow-origin')).toBe('*');
    const text = await doc.text();
    expect(text).not.toContain('Alice all');
    expect(JSON.parse(text)).toMatchObject({ resource_name: 'MCP control plane' });
  });

  it('answers another server’s token with 401 invalid_token, its challenge naming this server’s metadata', async () => {
    const res = await post(serverA.id, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { Authorization: `Bearer ${serverB.token}` });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toContain(`resource_metadata="${t.url}/.well-known/oauth-protected-resource/mcp/${serverA.id}"`);
    expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"');
    expect(await res.json()).toMatchObject({ error: 'invalid_token' });
  });

  it('answers another server’s token alike whether or not the server it names exists', async () => {
    const res = await post(newId('mcpServer'), { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { Authorization: `Bearer ${serverB.token}` });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: 'invalid_token' });
  });

  it('refuses a foreign Origin, a missing Accept, a wrong Content-Type, bad JSON, an unsupported version and a batch on 2025-06-18', async () => {
    const auth = { Authorization: `Bearer ${serverA.token}` };
    const ping = { jsonrpc: '2.0', id: 1, method: 'ping' };
    const origin = await post(serverA.id, ping, { ...auth, Origin: 'https://evil.example' });
    expect(origin.status).toBe(403);
    expect(await origin.json()).toMatchObject({ error: { code: -32600, message: 'Forbidden: Origin https://evil.example is not allowed' } });
    expect((await post(serverA.id, ping, { ...auth, Origin: new URL(t.deps.config.baseUrl).origin })).status).toBe(200);
    const accept = await post(serverA.id, ping, { ...auth, Accept: 'application/json' });
    expect(accept.status).toBe(406);
    expect(await accept.json()).toMatchObject({ error: { code: -32000 } });
    const type = await post(serverA.id, 'x', { ...auth, 'Content-Type': 'text/plain' });
    expect(type.status).toBe(415);
    expect(await type.json()).toMatchObject({ error: { code: -32600 } });
    const bad = await post(serverA.id, '{"jsonrpc":', auth);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { code: -32700 } });
    const notRpc = await post(serverA.id, { hello: 1 }, auth);
    expect(notRpc.status).toBe(400);
    expect(await notRpc.json()).toMatchObject({ error: { code: -32600 } });
    const version = await post(serverA.id, ping, { ...auth, 'MCP-Protocol-Version': '2024-01-01' });
    expect(version.status).toBe(400);
    expect(await version.json()).toMatchObject({ id: 1, error: { code: -32022, data: { requested: '2024-01-01' } } });
    const batch = await post(serverA.id, [ping, { ...ping, id: 2 }], { ...auth, 'MCP-Protocol-Version': '2025-06-18' });
    expect(batch.status).toBe(400);
    const old = await post(serverA.id, [ping, { ...ping, id: 2 }], { ...auth, 'MCP-Protocol-Version': '2025-03-26' });
    expect(old.status).toBe(200);
    expect(await old.json()).toEqual([
      { jsonrpc: '2.0', id: 1, result: {} },
      { jsonrpc: '2.0', id: 2, result: {} },
    ]);
    const note = await post(serverA.id, { jsonrpc: '2.0', method: 'notifications/initialized' }, auth);
    expect(note.status).toBe(202);
    expect(note.headers.get('mcp-session-id')).toBeNull();
    const get = await fetch(endpoint(serverA.id), { headers: { ...auth, Accept: 'text/event-stream' } });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')?.split(', ').sort()).toEqual(['DELETE', 'POST']);
    expect(await get.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
    const del = await fetch(endpoint(serverA.id), { method: 'DELETE', headers: { ...auth, 'Mcp-Session-Id': 'abc' } });
    expect(del.status).toBe(204);
  });

  it('answers before reading the body as 2026-07-28 asks: no id, the JSON-RPC code that fits, -32022 for an unknown revision in the header', async () => {
    const auth = { Authorization: `Bearer ${serverA.token}` };
    const ping = { jsonrpc: '2.0', id: 7, method: 'ping' };
    const origin = await post(serverA.id, ping, { ...auth, Origin: 'https://evil.example' });
    expect(origin.status).toBe(403);
    const refused = await origin.json();
    expect(refused).toEqual({
      jsonrpc: '2.0',
      error: { code: -32600, message: 'Forbidden: Origin https://evil.example is not allowed', data: { request_id: origin.headers.get('x-request-id') } },
    });
    const get = await fetch(endpoint(serverA.id), { headers: { ...auth, Accept: 'text/event-stream' } });
    expect(get.status).toBe(405);
    const notAllowed = (await get.json()) as { error: { code: number } };
    expect(notAllowed).not.toHaveProperty('id');
    expect(notAllowed.error.code).toBe(-32600);
    const malformed = await post(serverA.id, ping, { ...auth, 'MCP-Protocol-Version': 'x'.repeat(65) });
    expect(malformed.status).toBe(400);
    const mismatch = (await malformed.json()) as { error: { code: number } };
    expect(mismatch).not.toHaveProperty('id');
    expect(mismatch.error.code).toBe(-32020);
    // Named in the header only (no 2026-07-28 _meta), as when _meta names it: the revisions it speaks and the one asked for.
    const unknown = await post(serverA.id, ping, { ...auth, 'MCP-Protocol-Version': '2024-01-01' });
    expect(unknown.status).toBe(400);
    expect(await unknown.json()).toEqual({
      jsonrpc: '2.0',
      id: 7,
      error: {
        code: -32022,
        message: 'Unsupported protocol version',
        data: { supported: ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'], requested: '2024-01-01', request_id: unknown.headers.get('x-request-id') },
      },
    });
    const unknownNote = await post(serverA.id, { jsonrpc: '2.0', method: 'notifications/initialized' }, { ...auth, 'MCP-Protocol-Version': '2024-01-01' });
    expect(unknownNote.status).toBe(400);
    const noteRefused = (await unknownNote.json()) as { error: unknown };
    expect(noteRefused).not.toHaveProperty('id');
    expect(noteRefused.error).toMatchObject({ code: -32022, data: { requested: '2024-01-01' } });
  });

  it('stops a call in flight on notifications/cancelled naming its request id', async () => {
    const auth = { Authorization: `Bearer ${serverA.token}`, 'MCP-Protocol-Version': '2025-11-25' };
    const started = Date.now();
    const call = post(serverA.id, { jsonrpc: '2.0', id: 'slow-77', method: 'tools/call', params: { name: 'crm__slow', arguments: {} } }, auth);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const cancel = await post(serverA.id, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'slow-77', reason: 'user' } }, auth);
    expect(cancel.status).toBe(202);
    const res = await call;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      jsonrpc: '2.0',
      id: 'slow-77',
      result: { content: [{ type: 'text', text: 'The call was cancelled.' }], isError: true },
    });
    expect(Date.now() - started).toBeLessThan(2500);
  });

  it('never cancels a call of another client that happens to use the same request id', async () => {
    const auth = { Authorization: `Bearer ${serverA.token}`, 'MCP-Protocol-Version': '2025-11-25' };
    const slow = { jsonrpc: '2.0', id: 'same-5', method: 'tools/call', params: { name: 'crm__slow', arguments: {} } };
    const first = post(serverA.id, slow, auth);
    const second = post(serverA.id, slow, auth);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const cancel = await post(serverA.id, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'same-5', reason: 'user' } }, auth);
    expect(cancel.status).toBe(202);
    // Which of the two the client meant cannot be told: both run on (to the test upstream deadline, 3 s).
    for (const res of await Promise.all([first, second])) {
      const body = (await res.json()) as { result: CallToolResult };
      expect(body.result.isError).toBe(true);
      expect(textOf(body.result)).toMatch(/did not answer in time/);
    }
  }, 15_000);

  it('tells 2025-03-26 clients what their revision reads: the title in annotations, resource links as text', async () => {
    const auth = { Authorization: `Bearer ${serverA.token}` };
    const old = { ...auth, 'MCP-Protocol-Version': '2025-03-26' };
    type Listed = { result: { tools: { name: string; title?: string; annotations?: Record<string, unknown> }[] } };
    const listed = (await (await post(serverA.id, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, old)).json()) as Listed;
    const links = listed.result.tools.find((tool) => tool.name === 'every__get-resource-links');
    expect(links?.annotations).toMatchObject({ title: 'Get Resource Links Tool', readOnlyHint: true });
    const newer = (await (
      await post(serverA.id, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, { ...auth, 'MCP-Protocol-Version': '2025-11-25' })
    ).json()) as Listed;
    expect(newer.result.tools.find((tool) => tool.name === 'every__get-resource-links')?.annotations).not.toHaveProperty('title');

    type Called = { result: { content: { type: string; text?: string; uri?: string }[] } };
    const call = { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'every__get-resource-links', arguments: { count: 2 } } };
    const then = (await (await post(serverA.id, call, old)).json()) as Called;
    expect(then.result.content.map((block) => block.type)).toEqual(['text', 'text', 'text']);
    expect(then.result.content[1]?.text).toMatch(/^Blob Resource 1: \S+:\/\//);
    const now = (await (await post(serverA.id, call, { ...auth, 'MCP-Protocol-Version': '2025-11-25' })).json()) as Called;
    expect(now.result.content.map((block) => block.type)).toEqual(['text', 'resource_link', 'resource_link']);
    expect(then.result.content[2]?.text).toContain(now.result.content[2]?.uri as string);
  });

  it('names the server in initialize by the revision agreed on, which clients send no header for', async () => {
    const auth = { Authorization: `Bearer ${serverA.token}` };
    const init = (protocolVersion: string) => ({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion, capabilities: {}, clientInfo: { name: 't', version: '1' } },
    });
    type Initialized = { result: { protocolVersion: string; serverInfo: Record<string, unknown> } };
    const newer = (await (await post(serverA.id, init('2025-06-18'), auth)).json()) as Initialized;
    expect(newer.result).toMatchObject({ protocolVersion: '2025-06-18', serverInfo: { name: 'mcp-control-plane', title: 'Alice all' } });
    const old = (await (await post(serverA.id, init('2025-03-26'), auth)).json()) as Initialized;
    expect(old.result.protocolVersion).toBe('2025-03-26');
    expect(old.result.serverInfo).not.toHaveProperty('title');
  });

  it('records a call whose tool name carries a NUL character, with the character replaced (the batch it rides in is written)', async () => {
    const auth = { Authorization: `Bearer ${serverB.token}` };
    const odd = await post(serverB.id, { jsonrpc: '2.0', id: 'nul-1', method: 'tools/call', params: { name: 'crm__who\u0000ami', arguments: {} } }, auth);
    expect(await odd.json()).toMatchObject({ id: 'nul-1', error: { code: -32602 } });
    const fine = await post(serverB.id, { jsonrpc: '2.0', id: 'nul-2', method: 'tools/call', params: { name: 'crm__whoami', arguments: {} } }, auth);
    expect(fine.status).toBe(200);
    const rows = await recordsOf(serverB.id, (all) => all.some((r) => r.jsonrpc_id === 'nul-1') && all.some((r) => r.jsonrpc_id === 'nul-2'));
    expect(rows.find((r) => r.jsonrpc_id === 'nul-1')).toMatchObject({ tool_name: 'crm__who\uFFFDami', outcome: 'refused' });
    expect(rows.find((r) => r.jsonrpc_id === 'nul-2')).toMatchObject({ outcome: 'succeeded' });
  });

  it('lists no tools on an unavailable server and refuses its calls with -32602', async () => {
    const server = await mint(org.orgId, aliceId, 'utbx_dyn_all', 'Alice gone');
    await t.db.updateTable('mcp_servers').set({ status: 'unavailable' }).where('id', '=', server.id).execute();
    const auth = { Authorization: `Bearer ${server.token}` };
    const list = await post(server.id, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, auth);
    expect(await list.json()).toEqual({ jsonrpc: '2.0', id: 1, result: { tools: [] } });
    const call = await post(server.id, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'crm__whoami', arguments: {} } }, auth);
    expect(await call.json()).toMatchObject({ id: 2, error: { code: -32602 } });
  });

  it('writes a tool-call record for every tools/call', async () => {
    const outcomes = ['succeeded', 'tool_error', 'unavailable', 'held', 'refused'];
    const rows = await recordsOf(serverA.id, (all) => outcomes.every((o) => all.some((r) => r.outcome === o)));
    const whoami = rows.find((r) => r.tool_name === 'crm__whoami');
    expect(whoami).toMatchObject({
      org_id: org.orgId,
      user_id: aliceId,
      user_toolbox_id: 'utbx_dyn_all',
      connector_slug: crm,
      upstream_tool: 'whoami',
      outcome: 'succeeded',
    });
    expect(whoami?.connection_id).toMatch(/^conn_/);
    expect(whoami?.request_id).toMatch(/^req_/);
    expect(rows.map((r) => r.outcome)).toEqual(expect.arrayContaining(['succeeded', 'tool_error', 'unavailable', 'held', 'refused']));
    const server = await t.db.selectFrom('mcp_servers').select(['last_used_at']).where('id', '=', serverA.id).executeTakeFirstOrThrow();
    expect(server.last_used_at).not.toBeNull();
  });
});
