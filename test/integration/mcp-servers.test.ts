import type { components } from '../../generated/openapi';
import { mcpServerTokenAuthenticator } from '../../src/identity/mcp-tokens';
import { hashSecret } from '../../src/lib/crypto';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { eventsOf, expectError } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { insertTemplate, insertToolbox } from '../fixtures/user-toolboxes';

/*
 * MCP servers over HTTP through the typed client: minting, reading, renaming,
 * expiring, rotating and deleting the endpoints a member mints for their user toolboxes;
 * their tokens (shown once, hashed at rest, refused at once after rotation); and what goes
 * with user toolboxes and toolboxes. The MCP endpoint itself is tested in its own file.
 */

type Schemas = components['schemas'];
type McpServer = Schemas['McpServer'];

/** A caller: `op` sends an operation by id as one member, and get, post… send raw requests. */
type ServerClient = ReturnType<TestApp['as']>;

const DYN_ALL = 'utbx_dyn_all';
let t: TestApp;
let org: SeededOrg;
let aliceId: string;
let bobId: string;
let alice: ServerClient;
let bob: ServerClient;
let owner: ServerClient;
let aliceBox: string;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  aliceId = await t.factories.member(org.orgId);
  bobId = await t.factories.member(org.orgId);
  alice = t.as({ token: await t.factories.token(org.orgId, aliceId), org: org.orgId });
  bob = t.as({ token: await t.factories.token(org.orgId, bobId), org: org.orgId });
  owner = t.as({ token: org.token, org: org.orgId });
  const template = await insertTemplate(t, org.orgId, org.ownerId, { name: 'Assistant', entries: [{ connector_slug: 'docs-demo', tools: 'all' }] });
  const created = await t
    .as({ token: await t.factories.token(org.orgId, aliceId), org: org.orgId })
    .op('createUserToolbox', { body: { template_id: template } });
  expect(created.status).toBe(201);
  aliceBox = created.body.id;
});
afterAll(() => t.close());

async function mint(client: ServerClient, box: string, body: Schemas['McpServerCreate']): Promise<{ server: McpServer; token: string }> {
  const res = await client.op('createMcpServer', { params: { id: box }, body });
  expect(res.status).toBe(201);
  return { server: res.body.mcp_server, token: res.body.token };
}

/** What the mcpToken authenticator says of a token, as the router would ask it (no cache). */
async function authenticates(token: string): Promise<boolean> {
  const result = await mcpServerTokenAuthenticator.authenticate({ scheme: 'bearer', secret: token }, t.db);
  return result.status === 'ok';
}

/** An org-scoped operation that takes API tokens and sessions, through the app (and its credential cache). */
function orgOperationWith(token: string) {
  return t.call('GET', '/connection', undefined, { token, org: org.orgId });
}

describe('createMcpServer', () => {
  it('mints a server with its token shown once, stored hashed, with a hint and its URL', async () => {
    const res = await alice.op('createMcpServer', { params: { id: aliceBox }, body: { name: 'Claude Desktop' } });
    expect(res.status).toBe(201);
    const { mcp_server: server, token } = res.body as Schemas['McpServerMinted'];
    expect(token).toMatch(/^mcpt_[A-Za-z0-9_-]{43}$/);
    expect(res.headers.get('location')).toBe(`/user-toolbox/${aliceBox}/mcp/${server.id}`);
    expect(server).toMatchObject({
      user_toolbox_id: aliceBox,
      owner_user_id: aliceId,
      name: 'Claude Desktop',
      url: `${t.url}/mcp/${server.id}`,
      token_hint: token.slice(-4),
      status: 'active',
      expires_at: null,
      last_used_at: null,
      token_rotated_at: null,
    });
    // At rest: the SHA-256 only.
    const row = await t.db.selectFrom('mcp_servers').selectAll().where('id', '=', server.id).executeTakeFirstOrThrow();
    expect(row.token_hash).toBe(hashSecret(token));
    expect(JSON.stringify(row)).not.toContain(token);
    // Never again: not in reads, lists, nor the audit entry.
    for (const later of [
      await alice.op('getMcpServer', { params: { id: aliceBox, mcpId: server.id } }),
      await alice.op('listUserToolboxMcpServers', { params: { id: aliceBox } }),
      await alice.op('listMcpServers'),
    ]) {
      expect(later.status).toBe(200);
      expect(later.text).not.toContain(token);
      expect(later.text).not.toContain('"token"');
    }
    const audit = await t.factories.auditEntries(org.orgId, 'mcp_server.created');
    const entry = audit.find((a: { target_id: string | null }) => a.target_id === server.id);
    expect(entry).toBeDefined();
    expect(JSON.stringify(entry)).not.toContain(token);
    expect(JSON.stringify(entry)).not.toContain(row.token_hash);
    expect(await authenticates(token)).toBe(true);
  });

  it('mints for a dynamic user toolbox', async () => {
    const { server } = await mint(alice, DYN_ALL, { name: 'Cursor', expires_at: new Date(Date.now() + 86_400_000).toISOString() });
    expect(server).toMatchObject({ user_toolbox_id: DYN_ALL, status: 'active' });
    expect(server.expires_at).not.toBeNull();
  });

  it('refuses a name the user toolbox already has (409), an expiry in the past (400), a bad body (400)', async () => {
    await mint(alice, aliceBox, { name: 'Twice' });
    expectError(await alice.op('createMcpServer', { params: { id: aliceBox }, body: { name: 'Twice' } }), 409, 'name_taken');
    // Another user toolbox may use the name.
    await mint(alice, DYN_ALL, { name: 'Twice' });
    expectError(
      await alice.op('createMcpServer', { params: { id: aliceBox }, body: { name: 'Past', expires_at: '2020-01-01T00:00:00.000Z' } }),
      400,
      'validation_failed',
    );
    expectError(await t.as({ token: org.token, org: org.orgId }).post(`/user-toolbox/${aliceBox}/mcp`, { name: '' }), 400, 'validation_failed');
    expectError(
      await t.as({ token: org.token, org: org.orgId }).post(`/user-toolbox/${aliceBox}/mcp`, { name: 'x', token: 'mcpt_mine' }),
      400,
      'validation_failed',
    );
  });

  it('answers 404 for another member’s user toolbox, an unknown one, and a toolbox not shared with the caller', async () => {
    expectError(await bob.op('createMcpServer', { params: { id: aliceBox }, body: { name: 'Mine now' } }), 404, 'not_found');
    expectError(await alice.op('createMcpServer', { params: { id: `utbx_${newId('userToolbox').slice(5)}` }, body: { name: 'Nowhere' } }), 404, 'not_found');
    const toolbox = await insertToolbox(t, org.orgId, { entries: [], principal: { type: 'user', id: bobId } });
    expectError(await alice.op('createMcpServer', { params: { id: `utbx_dyn_tbx_${toolbox.slice(4)}` }, body: { name: 'Not shared' } }), 404, 'not_found');
  });

  it('refuses past the plan limit mcp_servers with 403 entitlement_exceeded', async () => {
    const full = await t.factories.org();
    await t.db
      .insertInto('mcp_servers')
      .values(
        Array.from({ length: 1000 }, (_, i) => ({
          id: newId('mcpServer'),
          org_id: full.orgId,
          user_toolbox_id: DYN_ALL,
          owner_user_id: full.ownerId,
          name: `s${i}`,
          token_hash: hashSecret(`mcpt_filler_${full.orgId}_${i}`),
          token_hint: 'fill',
        })),
      )
      .execute();
    const client = t.as({ token: full.token, org: full.orgId });
    expectError(await client.op('createMcpServer', { params: { id: DYN_ALL }, body: { name: 'One more' } }), 403, 'entitlement_exceeded');
    await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', full.orgId).execute();
    expect((await client.op('createMcpServer', { params: { id: DYN_ALL }, body: { name: 'One more' } })).status).toBe(201);
  });
});

describe('reading', () => {
  it('lists only the caller’s own servers, oldest first, a page at a time, filtered by status', async () => {
    const mine = t.as({ token: await t.factories.token(org.orgId, await t.factories.member(org.orgId)), org: org.orgId });
    const a = await mint(mine, DYN_ALL, { name: 'A' });
    const b = await mint(mine, DYN_ALL, { name: 'B' });
    const c = await mint(mine, DYN_ALL, { name: 'C' });
    const first = await mine.op('listMcpServers', { query: { limit: 2 } });
    expect(first.status).toBe(200);
    expect(first.body.data.map((s: McpServer) => s.id)).toEqual([a.server.id, b.server.id]);
    const second = await mine.op('listMcpServers', { query: { limit: 2, cursor: first.body.next_cursor ?? undefined } });
    expect(second.body).toEqual({ data: [expect.objectContaining({ id: c.server.id })], next_cursor: null });
    await t.db
      .updateTable('mcp_servers')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', b.server.id)
      .execute();
    expect((await mine.op('listMcpServers', { query: { status: 'expired' } })).body.data.map((s: McpServer) => s.id)).toEqual([b.server.id]);
    expect((await mine.op('listMcpServers', { query: { status: 'active' } })).body.data.map((s: McpServer) => s.id)).toEqual([a.server.id, c.server.id]);
    expect((await mine.op('listMcpServers', { query: { status: 'unavailable' } })).body.data).toEqual([]);
    expect((await mine.op('listUserToolboxMcpServers', { params: { id: DYN_ALL } })).body.data).toHaveLength(3);
    // Nobody else's, whatever their permissions: the owner holds every permission.
    const ownersView = await owner.op('listMcpServers', { query: { limit: 100 } });
    expect(ownersView.body.data.every((s: McpServer) => s.owner_user_id === org.ownerId)).toBe(true);
    expect((await owner.op('listUserToolboxMcpServers', { params: { id: DYN_ALL } })).body.data.some((s: McpServer) => s.id === a.server.id)).toBe(false);
    expectError(await mine.op('listMcpServers', { query: { cursor: 'bm90LWFuLWlk' } }), 400, 'invalid_cursor');
  });

  it('answers 404 for another member’s server or user toolbox, and a server of another user toolbox', async () => {
    const { server } = await mint(alice, aliceBox, { name: 'Private' });
    expectError(await bob.op('getMcpServer', { params: { id: aliceBox, mcpId: server.id } }), 404, 'not_found');
    expectError(await owner.op('getMcpServer', { params: { id: aliceBox, mcpId: server.id } }), 404, 'not_found');
    expectError(await bob.op('listUserToolboxMcpServers', { params: { id: aliceBox } }), 404, 'not_found');
    expectError(await alice.op('getMcpServer', { params: { id: DYN_ALL, mcpId: server.id } }), 404, 'not_found');
    expectError(await bob.op('updateMcpServer', { params: { id: aliceBox, mcpId: server.id }, body: { name: 'Taken over' } }), 404, 'not_found');
    expectError(await bob.op('rotateMcpServerToken', { params: { id: aliceBox, mcpId: server.id } }), 404, 'not_found');
    expectError(await bob.op('deleteMcpServer', { params: { id: aliceBox, mcpId: server.id } }), 404, 'not_found');
    expect((await alice.op('getMcpServer', { params: { id: aliceBox, mcpId: server.id } })).body).toMatchObject({ id: server.id, name: 'Private' });
  });

  it('answers 404 for another organization’s server', async () => {
    const other = await t.factories.org();
    const otherClient = t.as({ token: other.token, org: other.orgId });
    const { server } = await mint(otherClient, DYN_ALL, { name: 'Theirs' });
    expectError(await owner.op('getMcpServer', { params: { id: DYN_ALL, mcpId: server.id } }), 404, 'not_found');
    expectError(await owner.op('rotateMcpServerToken', { params: { id: DYN_ALL, mcpId: server.id } }), 404, 'not_found');
    expectError(await owner.op('deleteMcpServer', { params: { id: DYN_ALL, mcpId: server.id } }), 404, 'not_found');
    expect((await otherClient.op('getMcpServer', { params: { id: DYN_ALL, mcpId: server.id } })).status).toBe(200);
  });

  it('counts servers on user toolboxes (mcp_server_count)', async () => {
    const member = await t.factories.member(org.orgId);
    const client = t.as({ token: await t.factories.token(org.orgId, member), org: org.orgId });
    expect((await client.op('getUserToolbox', { params: { id: DYN_ALL } })).body.mcp_server_count).toBe(0);
    await mint(client, DYN_ALL, { name: 'One' });
    await mint(client, DYN_ALL, { name: 'Two' });
    expect((await client.op('getUserToolbox', { params: { id: DYN_ALL } })).body.mcp_server_count).toBe(2);
    const listed = await client.op('listUserToolboxes');
    expect(listed.body.data.find((b: { id: string }) => b.id === DYN_ALL)?.mcp_server_count).toBe(2);
  });
});

describe('updateMcpServer', () => {
  it('renames and moves the expiry; an expired server comes back with the same token', async () => {
    const { server, token } = await mint(alice, aliceBox, { name: 'Workshop', expires_at: new Date(Date.now() + 60_000).toISOString() });
    const renamed = await alice.op('updateMcpServer', { params: { id: aliceBox, mcpId: server.id }, body: { name: 'Workshop demo' } });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({ name: 'Workshop demo', token_hint: server.token_hint, url: server.url });
    // Expiry passes: the token is refused, the status says expired.
    await t.db
      .updateTable('mcp_servers')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', server.id)
      .execute();
    expect((await alice.op('getMcpServer', { params: { id: aliceBox, mcpId: server.id } })).body.status).toBe('expired');
    expect(await authenticates(token)).toBe(false);
    expect((await orgOperationWith(token)).body.detail).toMatch(/expired/);
    const moved = await alice.op('updateMcpServer', { params: { id: aliceBox, mcpId: server.id }, body: { expires_at: null } });
    expect(moved.body).toMatchObject({ status: 'active', expires_at: null });
    expect(await authenticates(token)).toBe(true);
    expectError(
      await alice.op('updateMcpServer', { params: { id: aliceBox, mcpId: server.id }, body: { expires_at: '2020-01-01T00:00:00.000Z' } }),
      400,
      'validation_failed',
    );
    expectError(await t.as({ token: org.token, org: org.orgId }).patch(`/user-toolbox/${aliceBox}/mcp/${server.id}`, {}), 400, 'validation_failed');
    await mint(alice, aliceBox, { name: 'Other' });
    expectError(await alice.op('updateMcpServer', { params: { id: aliceBox, mcpId: server.id }, body: { name: 'Other' } }), 409, 'name_taken');
    const audit = await t.factories.auditEntries(org.orgId, 'mcp_server.updated');
    expect(audit.filter((a: { target_id: string | null }) => a.target_id === server.id).length).toBeGreaterThanOrEqual(2);
  });

  it('records an update in the audit log as {from, to} per changed member', async () => {
    const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
    const { server } = await mint(alice, aliceBox, { name: 'Audited', expires_at: expiresAt });
    const later = new Date(Date.now() + 7_200_000).toISOString();
    expect((await alice.op('updateMcpServer', { params: { id: aliceBox, mcpId: server.id }, body: { name: 'Audited again', expires_at: later } })).status).toBe(
      200,
    );
    expect((await alice.op('updateMcpServer', { params: { id: aliceBox, mcpId: server.id }, body: { name: 'Audited again', expires_at: null } })).status).toBe(
      200,
    );
    const audit = (await t.factories.auditEntries(org.orgId, 'mcp_server.updated')).filter((a) => a.target_id === server.id);
    expect(audit.map((a) => a.changes)).toEqual([
      { name: { from: 'Audited', to: 'Audited again' }, expires_at: { from: expiresAt, to: later } },
      { expires_at: { from: later, to: null } },
    ]);
  });
});

describe('rotateMcpServerToken', () => {
  it('shows a new token once; the old one is refused at once, through the credential cache too', async () => {
    const { server, token } = await mint(alice, aliceBox, { name: 'Rotating' });
    // The app remembers the token: a first use through the router caches it.
    expect((await orgOperationWith(token)).body.detail).toBe('This operation does not accept an MCP server token.');
    expect((await orgOperationWith(token)).body.detail).toBe('This operation does not accept an MCP server token.');
    const res = await alice.op('rotateMcpServerToken', { params: { id: aliceBox, mcpId: server.id } });
    expect(res.status).toBe(200);
    const rotated = res.body as Schemas['McpServerMinted'];
    expect(rotated.token).toMatch(/^mcpt_/);
    expect(rotated.token).not.toBe(token);
    expect(rotated.mcp_server).toMatchObject({ id: server.id, url: server.url, token_hint: rotated.token.slice(-4) });
    expect(rotated.mcp_server.token_rotated_at).not.toBeNull();
    // At once: the app's cache forgot the old token.
    const old = await orgOperationWith(token);
    expect(old.status).toBe(401);
    expect(old.body.detail).toMatch(/unknown, was rotated/);
    expect(await authenticates(token)).toBe(false);
    expect(await authenticates(rotated.token)).toBe(true);
    const row = await t.db.selectFrom('mcp_servers').select(['token_hash', 'token_hint']).where('id', '=', server.id).executeTakeFirstOrThrow();
    expect(row).toEqual({ token_hash: hashSecret(rotated.token), token_hint: rotated.token.slice(-4) });
    expect((await alice.op('getMcpServer', { params: { id: aliceBox, mcpId: server.id } })).text).not.toContain(rotated.token);
    const events = await eventsOf(t, org.orgId, 'mcp_server.token_rotated');
    expect(events.map((e) => e.payload)).toContainEqual(
      expect.objectContaining({ mcp_server: { id: server.id, name: 'Rotating', user_toolbox_id: aliceBox, owner_user_id: aliceId } }),
    );
    const audit = (await t.factories.auditEntries(org.orgId, 'mcp_server.token_rotated')).filter(
      (a: { target_id: string | null }) => a.target_id === server.id,
    );
    expect(audit).toHaveLength(1);
    expect(JSON.stringify(audit)).not.toContain(rotated.token);
    expect(JSON.stringify(events)).not.toContain(rotated.token);
  });
});

describe('the mcpToken authenticator', () => {
  it('authenticates a server token as the owner, only for the MCP endpoint’s scheme', async () => {
    const { server, token } = await mint(alice, aliceBox, { name: 'Scheme' });
    const result = await mcpServerTokenAuthenticator.authenticate({ scheme: 'bearer', secret: token }, t.db);
    expect(result).toMatchObject({
      status: 'ok',
      caller: { kind: 'mcp_client', via: 'server_token', userId: aliceId, mcpServerId: server.id, orgId: org.orgId, clientId: null },
    });
    if (result.status === 'ok' && result.caller.kind === 'mcp_client') expect(result.caller.access?.permissions.has('mcp_server:view')).toBe(true);
    // An org-scoped operation of the apiToken/session schemes refuses it with 401.
    const res = await orgOperationWith(token);
    expect(res.status).toBe(401);
    expect(res.body).toMatchObject({ code: 'invalid_token', detail: 'This operation does not accept an MCP server token.' });
    expect((await t.call('GET', '/user/me', undefined, { token })).status).toBe(401);
    expect((await orgOperationWith('mcpt_notarealtokenatall0000000000000000000000000')).body.detail).toMatch(/unknown/);
  });

  it('refuses the token of an owner who is suspended or removed', async () => {
    const member = await t.factories.member(org.orgId);
    const client = t.as({ token: await t.factories.token(org.orgId, member), org: org.orgId });
    const { token } = await mint(client, DYN_ALL, { name: 'Leaving' });
    expect(await authenticates(token)).toBe(true);
    await t.db.updateTable('memberships').set({ status: 'suspended' }).where('org_id', '=', org.orgId).where('user_id', '=', member).execute();
    const result = await mcpServerTokenAuthenticator.authenticate({ scheme: 'bearer', secret: token }, t.db);
    expect(result).toMatchObject({ status: 'invalid', detail: expect.stringMatching(/suspended/) });
  });
});

describe('deleteMcpServer', () => {
  it('deletes the server and its token; a second delete is 404', async () => {
    const { server, token } = await mint(alice, aliceBox, { name: 'Short-lived' });
    expect((await orgOperationWith(token)).body.detail).toBe('This operation does not accept an MCP server token.');
    expect((await alice.op('deleteMcpServer', { params: { id: aliceBox, mcpId: server.id } })).status).toBe(204);
    expect((await orgOperationWith(token)).body.detail).toMatch(/unknown/);
    expectError(await alice.op('getMcpServer', { params: { id: aliceBox, mcpId: server.id } }), 404, 'not_found');
    expectError(await alice.op('deleteMcpServer', { params: { id: aliceBox, mcpId: server.id } }), 404, 'not_found');
    const audit = (await t.factories.auditEntries(org.orgId, 'mcp_server.deleted')).filter((a: { target_id: string | null }) => a.target_id === server.id);
    expect(audit).toHaveLength(1);
  });
});

describe('what goes with user toolboxes and toolboxes', () => {
  it('deleting a stored user toolbox deletes its servers and names them in its audit entry', async () => {
    const template = await insertTemplate(t, org.orgId, org.ownerId, { name: 'Short', entries: [{ connector_slug: 'docs-demo', tools: 'all' }] });
    const created = await t
      .as({ token: await t.factories.token(org.orgId, aliceId), org: org.orgId })
      .op('createUserToolbox', { body: { template_id: template } });
    const box = created.body.id as string;
    const one = await mint(alice, box, { name: 'One' });
    const two = await mint(alice, box, { name: 'Two' });
    const kept = await mint(alice, DYN_ALL, { name: 'Kept' });
    expect((await alice.op('deleteUserToolbox', { params: { id: box } })).status).toBe(204);
    expect(await t.db.selectFrom('mcp_servers').select('id').where('user_toolbox_id', '=', box).execute()).toEqual([]);
    expect(await authenticates(one.token)).toBe(false);
    expect(await authenticates(kept.token)).toBe(true);
    expectError(await alice.op('getMcpServer', { params: { id: box, mcpId: two.server.id } }), 404, 'not_found');
    expectError(await alice.op('listUserToolboxMcpServers', { params: { id: box } }), 404, 'not_found');
    const audit = (await t.factories.auditEntries(org.orgId, 'user_toolbox.deleted')).find((a: { target_id: string | null }) => a.target_id === box);
    expect(JSON.stringify(audit)).toContain(one.server.id);
    expect(JSON.stringify(audit)).toContain(two.server.id);
  });

  it('a deleted toolbox makes the servers of its dynamic user toolbox unavailable; they can still be read and deleted', async () => {
    const toolbox = await insertToolbox(t, org.orgId, { entries: [], principal: { type: 'user', id: aliceId } });
    const dynamic = `utbx_dyn_tbx_${toolbox.slice(4)}`;
    const { server, token } = await mint(alice, dynamic, { name: 'Shared box' });
    expect((await owner.op('listUserToolboxMcpServers', { params: { id: DYN_ALL } })).status).toBe(200);
    const deleted = await t.call('DELETE', `/toolbox/${toolbox}`, undefined, { token: org.token, org: org.orgId });
    expect(deleted.status).toBe(204);
    const read = await alice.op('getMcpServer', { params: { id: dynamic, mcpId: server.id } });
    expect(read.body.status).toBe('unavailable');
    expect((await alice.op('listUserToolboxMcpServers', { params: { id: dynamic } })).body.data.map((s: McpServer) => s.id)).toEqual([server.id]);
    expect((await alice.op('listMcpServers', { query: { status: 'unavailable' } })).body.data.map((s: McpServer) => s.id)).toContain(server.id);
    // Still authenticates: the endpoint answers it with an empty tools/list.
    expect(await authenticates(token)).toBe(true);
    expectError(await alice.op('createMcpServer', { params: { id: dynamic }, body: { name: 'Another' } }), 404, 'not_found');
    expect((await alice.op('deleteMcpServer', { params: { id: dynamic, mcpId: server.id } })).status).toBe(204);
  });

  it('a revoked share makes the servers of members who lost the toolbox unavailable, and sharing it again makes them active', async () => {
    const toolbox = await insertToolbox(t, org.orgId, { entries: [], principal: { type: 'user', id: aliceId } });
    const dynamic = `utbx_dyn_tbx_${toolbox.slice(4)}`;
    const { server } = await mint(alice, dynamic, { name: 'Until revoked' });
    const shares = await t.call('GET', `/toolbox/${toolbox}/share`, undefined, { token: org.token, org: org.orgId });
    expect(shares.status).toBe(200);
    const share = shares.body.data.find((s: { principal: { id: string } }) => s.principal.id === aliceId);
    const revoked = await t.call('DELETE', `/toolbox/${toolbox}/share/${share.id}`, undefined, { token: org.token, org: org.orgId });
    expect(revoked.status).toBe(204);
    expect((await alice.op('getMcpServer', { params: { id: dynamic, mcpId: server.id } })).body.status).toBe('unavailable');
    // As revokeToolboxShare promises: unavailable until the toolbox is shared with them again.
    const again = await t.call(
      'POST',
      `/toolbox/${toolbox}/share`,
      { principal: { type: 'user', id: aliceId }, level: 'use' },
      { token: org.token, org: org.orgId },
    );
    expect(again.status).toBe(201);
    expect((await alice.op('getMcpServer', { params: { id: dynamic, mcpId: server.id } })).body.status).toBe('active');
  });

  it('follows team membership when the toolbox reaches its owner through a team: leaving, joining again, the team deleted', async () => {
    const admin = t.as({ token: org.token, org: org.orgId });
    const team = await admin.post('/team', { name: `Shared via team ${Math.random().toString(36).slice(2, 8)}` });
    expect(team.status).toBe(201);
    expect((await admin.post(`/team/${team.body.id}/members`, { user_id: aliceId })).status).toBe(201);
    const toolbox = await insertToolbox(t, org.orgId, { entries: [], principal: { type: 'team', id: team.body.id } });
    const dynamic = `utbx_dyn_tbx_${toolbox.slice(4)}`;
    const { server } = await mint(alice, dynamic, { name: 'Through the team' });
    expect((await admin.delete(`/team/${team.body.id}/members/${aliceId}`)).status).toBe(204);
    expect((await alice.op('getMcpServer', { params: { id: dynamic, mcpId: server.id } })).body.status).toBe('unavailable');
    expect((await admin.post(`/team/${team.body.id}/members`, { user_id: aliceId })).status).toBe(201);
    expect((await alice.op('getMcpServer', { params: { id: dynamic, mcpId: server.id } })).body.status).toBe('active');
    expect((await admin.delete(`/team/${team.body.id}`)).status).toBe(204);
    expect((await alice.op('getMcpServer', { params: { id: dynamic, mcpId: server.id } })).body.status).toBe('unavailable');
  });
});
