import { builtIns } from '../../src/areas/connectors/catalog';
import { startTestApp, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';
import { startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';
import { insertToolbox } from '../fixtures/user-toolboxes';

/*
 * A suspended member's connections serve nobody, whatever the connector: a toolbox shared with
 * another member stops reaching the upstream with the suspended member's key. The built-in
 * connector keys-demo (test/fixtures/catalog) is pointed at a loopback peer for this file: the
 * catalog itself accepts public https URLs only.
 */

const KEY = 'key-alice-Su5Pn8';
const peer = useUpstream(() => startApiKeyUpstream({ keys: { [KEY]: 'alice' }, placement: { placement: 'header', name: 'X-Api-Key', value_prefix: null } }));
let t: TestApp;
let org: SeededOrg;

const call = async (server: { id: string; token: string }, name: string) => {
  const res = await fetch(`${t.url}/mcp/${server.id}`, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${server.token}`,
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': '2025-11-25',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {} } }),
  });
  return (await res.json()) as {
    result?: { isError?: boolean; content: { text: string }[]; structuredContent?: Record<string, unknown> };
    error?: { code: number };
  };
};

beforeAll(async () => {
  t = await startTestApp();
  (builtIns().entries.get('keys-demo') as { content: { mcp_url: string } }).content.mcp_url = `${new URL(peer.peer.url).origin}/mcp`;
  org = await t.factories.org();
}, 60_000);
afterAll(() => t.close());

it('stops serving a suspended member’s connection to a built-in connector through a toolbox shared with others', async () => {
  const aliceId = await t.factories.member(org.orgId);
  const bobId = await t.factories.member(org.orgId);
  const aliceToken = await t.factories.token(org.orgId, aliceId);
  const connection = await t.call('POST', '/connection', { connector_slug: 'keys-demo', api_key: KEY }, { token: aliceToken, org: org.orgId });
  expect(connection.status).toBe(201);
  const toolbox = await insertToolbox(t, org.orgId, { entries: [{ connection_id: connection.body.id, tools: 'all' }], principal: { type: 'user', id: bobId } });
  const bobToken = await t.factories.token(org.orgId, bobId);
  const minted = await t.call(
    'POST',
    `/user-toolbox/utbx_dyn_tbx_${toolbox.slice('tbx_'.length)}/mcp`,
    { name: 'Shared keys' },
    { token: bobToken, org: org.orgId },
  );
  expect(minted.status).toBe(201);
  const server = { id: minted.body.mcp_server.id as string, token: minted.body.token as string };
  expect((await call(server, 'keys-demo__whoami')).result?.structuredContent).toMatchObject({ member: 'alice', credential: KEY });

  expect((await t.call('PATCH', `/member/${aliceId}`, { status: 'suspended' }, { token: org.token, org: org.orgId })).status).toBe(200);
  const seen = peer.peer.seen.length;
  const after = await call(server, 'keys-demo__whoami');
  expect(after.result?.isError).toBe(true);
  expect(after.result?.content[0]?.text).toMatch(/connector is no longer available/);
  expect(peer.peer.seen.length).toBe(seen);

  // Reactivated, the connection serves again.
  expect((await t.call('PATCH', `/member/${aliceId}`, { status: 'active' }, { token: org.token, org: org.orgId })).status).toBe(200);
  expect((await call(server, 'keys-demo__whoami')).result?.structuredContent).toMatchObject({ member: 'alice' });
});
