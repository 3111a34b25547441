import { randomBytes } from 'node:crypto';
import type { components } from '../../generated/openapi';
import { toolboxEntries, toolboxesSharedWith } from '../../src/areas/toolboxes';
import { auditDigest } from '../../src/http/context';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import type { SeededOrg } from '../support/factories';
import { startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';

/*
 * Toolboxes over HTTP through the typed client, with real connections to an API-key MCP
 * upstream on loopback: connection and synthetic-tool entries and who may put them in,
 * entries read live from the connections (a connection gone needs_reauth shows at once),
 * wholesale replacement, visibility through shares vs toolbox:manage, the plan limit, and
 * the functions the user toolboxes area builds on.
 */

type Schemas = components['schemas'];
const unique = () => randomBytes(4).toString('hex');
const KEY_A = 'key-alice-Tb9x2QmW7r';
const KEY_B = 'key-bob-Kp4s8LzN1c';

const upstream = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' } }));

/** A caller: `op` sends an operation by id as one member, and get, post… send raw requests. */
type Client = ReturnType<TestApp['as']>;

let t: TestApp;
let org: SeededOrg;
let owner: Client;
/** Alice curates toolboxes (toolbox:manage, not connection:manage); Bob and Dan are plain members. */
let aliceId: string;
let bobId: string;
let danId: string;
let alice: Client;
let bob: Client;
let dan: Client;
let teamId: string;
let crm: string;
let aliceConn: string;
let bobConn: string;
let stool: string;

async function syntheticTool(orgId: string, name = `triage_${unique()}`): Promise<string> {
  const id = newId('syntheticTool');
  await t.db
    .insertInto('synthetic_tools')
    .values({
      id,
      org_id: orgId,
      name,
      description: 'Triage a ticket.',
      input_schema: JSON.stringify({ type: 'object' }),
      steps: JSON.stringify([]),
      output: JSON.stringify({}),
    })
    .execute();
  return id;
}

async function connect(token: string, key: string): Promise<string> {
  const res = await t.as({ token, org: org.orgId }).op('createConnection', { body: { connector_slug: crm, api_key: key } });
  expect(res.status).toBe(201);
  return res.body.id;
}

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  owner = t.as({ token: org.token, org: org.orgId });
  const curator = await t.factories.customRole(org.orgId, ['toolbox:view', 'toolbox:manage', 'connection:view', 'connection:use', 'connector:view']);
  aliceId = await t.factories.member(org.orgId, { roles: [curator] });
  bobId = await t.factories.member(org.orgId);
  danId = await t.factories.member(org.orgId);
  const aliceToken = await t.factories.token(org.orgId, aliceId);
  const bobToken = await t.factories.token(org.orgId, bobId);
  alice = t.as({ token: aliceToken, org: org.orgId });
  bob = t.as({ token: bobToken, org: org.orgId });
  dan = t.as({ token: await t.factories.token(org.orgId, danId), org: org.orgId });
  teamId = await t.factories.team(org.orgId, `Support ${unique()}`, [danId]);
  crm = await customConnector(t, org.orgId, {
    name: 'Acme CRM',
    mcp_url: `${new URL(upstream.peer.url).origin}/mcp`,
    auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
  });
  aliceConn = await connect(aliceToken, KEY_A);
  bobConn = await connect(bobToken, KEY_B);
  stool = await syntheticTool(org.orgId, 'triage_ticket');
});
afterAll(() => t.close());

async function created(client: Client, body: Partial<Schemas['ToolboxCreate']> = {}) {
  const res = await client.op('createToolbox', { body: { name: `Support desk ${unique()}`, ...body } });
  expect(res.status).toBe(201);
  return res.body as Schemas['Toolbox'];
}

describe('create and read', () => {
  it('creates a toolbox of connection and synthetic-tool entries, each shown with what it names', async () => {
    const res = await alice.op('createToolbox', {
      body: {
        name: 'Support desk',
        description: 'Ticket triage.',
        entries: [
          { type: 'connection', connection_id: aliceConn, tools: ['search_contacts', 'get_contact'] },
          { type: 'synthetic_tool', synthetic_tool_id: stool },
        ],
      },
    });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/toolbox/${res.body.id}`);
    expect(res.body).toMatchObject({
      id: expect.stringMatching(/^tbx_/),
      name: 'Support desk',
      description: 'Ticket triage.',
      created_by_user_id: aliceId,
      entries: [
        {
          type: 'connection',
          connection_id: aliceConn,
          connector_slug: crm,
          connection_owner_user_id: aliceId,
          connection_status: 'active',
          tools: ['search_contacts', 'get_contact'],
        },
        { type: 'synthetic_tool', synthetic_tool_id: stool, name: 'triage_ticket' },
      ],
    });
    expect((await alice.op('getToolbox', { params: { id: res.body.id } })).body).toEqual(res.body);
    const audit = (await t.factories.auditEntries(org.orgId, 'toolbox.created')).find((e) => e.target_id === res.body.id);
    expect(audit).toMatchObject({ actor_user_id: aliceId, changes: { name: 'Support desk' } });
    expect(audit?.changes.entries).toHaveLength(2);
    expectError(await alice.op('createToolbox', { body: { name: 'Support desk' } }), 409, 'name_taken');
    // No entries: an empty toolbox.
    expect((await created(alice)).entries).toEqual([]);
  });

  it("refuses another member's connection without connection:manage, naming the entry; the owner may use it", async () => {
    const res = await alice.op('createToolbox', {
      body: {
        name: `x ${unique()}`,
        entries: [
          { type: 'synthetic_tool', synthetic_tool_id: stool },
          { type: 'connection', connection_id: bobConn, tools: 'all' },
        ],
      },
    });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors).toEqual([expect.objectContaining({ in: 'body', pointer: '/entries/1/connection_id' })]);
    const byOwner = await created(owner, { entries: [{ type: 'connection', connection_id: bobConn, tools: 'all' }] });
    expect(byOwner.entries).toEqual([
      { type: 'connection', connection_id: bobConn, connector_slug: crm, connection_owner_user_id: bobId, connection_status: 'active', tools: 'all' },
    ]);
    // Alice may edit that toolbox and keep Bob's connection in it, but not bring it into another.
    const kept = await alice.op('updateToolbox', {
      params: { id: byOwner.id },
      body: {
        entries: [
          { type: 'connection', connection_id: bobConn, tools: ['search_contacts'] },
          { type: 'connection', connection_id: aliceConn, tools: 'all' },
        ],
      },
    });
    expect(kept.status).toBe(200);
    expect(kept.body.entries.map((e) => (e.type === 'connection' ? e.connection_id : undefined))).toEqual([bobConn, aliceConn]);
    const dropped = await alice.op('updateToolbox', {
      params: { id: byOwner.id },
      body: { entries: [{ type: 'connection', connection_id: aliceConn, tools: 'all' }] },
    });
    expect(dropped.status).toBe(200);
    expectError(
      await alice.op('updateToolbox', { params: { id: byOwner.id }, body: { entries: [{ type: 'connection', connection_id: bobConn, tools: 'all' }] } }),
      400,
      'unknown_reference',
    );
  });

  it("refuses what is not the organization's, and repeated entries", async () => {
    const other = await t.factories.org();
    const theirTool = await syntheticTool(other.orgId);
    const foreign = await owner.op('createToolbox', {
      body: {
        name: `x ${unique()}`,
        entries: [
          { type: 'synthetic_tool', synthetic_tool_id: theirTool },
          { type: 'connection', connection_id: newId('connection'), tools: 'all' },
        ],
      },
    });
    expectError(foreign, 400, 'unknown_reference');
    expect(foreign.error?.errors.map((e: { pointer: string }) => e.pointer)).toEqual(['/entries/0/synthetic_tool_id', '/entries/1/connection_id']);
    const repeated = await owner.op('createToolbox', {
      body: {
        name: `x ${unique()}`,
        entries: [
          { type: 'connection', connection_id: aliceConn, tools: 'all' },
          { type: 'synthetic_tool', synthetic_tool_id: stool },
          { type: 'connection', connection_id: aliceConn, tools: ['search_contacts'] },
        ],
      },
    });
    expectError(repeated, 400, 'validation_failed');
    expect(repeated.error?.errors).toEqual([expect.objectContaining({ in: 'body', pointer: '/entries/2' })]);
    expectError(await owner.post('/toolbox', { name: 'x', entries: [{ type: 'connection', connection_id: aliceConn }] }), 400, 'validation_failed');
    expectError(await bob.op('createToolbox', { body: { name: 'x' } }), 403, 'missing_permission');
  });

  it('refuses a toolbox past the plan limit with 403 entitlement_exceeded', async () => {
    const full = await t.factories.org();
    await t.db
      .insertInto('toolboxes')
      .values(
        Array.from({ length: 1000 }, (_, i) => ({
          id: newId('toolbox'),
          org_id: full.orgId,
          name: `Toolbox ${i}`,
          description: null,
          created_by_user_id: null,
        })),
      )
      .execute();
    const res = await t.as({ token: full.token, org: full.orgId }).op('createToolbox', { body: { name: 'One more' } });
    expectError(res, 403, 'entitlement_exceeded');
    expect(res.error?.detail).toContain('toolboxes');
    await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', full.orgId).execute();
    expect((await t.as({ token: full.token, org: full.orgId }).op('createToolbox', { body: { name: 'One more' } })).status).toBe(201);
  });
});

describe('entries read live', () => {
  it('shows a connection that became needs_reauth in connection_status at once', async () => {
    const conn = await connect(await t.factories.token(org.orgId, aliceId), KEY_A);
    const box = await created(alice, { entries: [{ type: 'connection', connection_id: conn, tools: 'all' }] });
    expect(box.entries[0]).toMatchObject({ connection_status: 'active' });
    upstream.peer.setKeys({ [KEY_B]: 'bob' });
    try {
      await t.db.deleteFrom('connection_tools').where('connection_id', '=', conn).execute();
      const conns = t.as({ token: await t.factories.token(org.orgId, aliceId), org: org.orgId });
      expectError(await conns.op('listConnectionTools', { params: { id: conn } }), 409, 'connection_needs_reauth');
      expect((await alice.op('getToolbox', { params: { id: box.id } })).body.entries[0]).toMatchObject({
        connection_id: conn,
        connection_status: 'needs_reauth',
      });
      const listed = (await alice.op('listToolboxes', { query: { connection_id: conn } })).body.data;
      expect(listed.map((x: Schemas['Toolbox']) => x.entries[0])).toEqual([expect.objectContaining({ connection_status: 'needs_reauth' })]);
    } finally {
      upstream.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob' });
    }
  });

  it('drops the entries of a deleted connection, and shows a transfer’s new owner', async () => {
    const conn = await connect(await t.factories.token(org.orgId, aliceId), KEY_A);
    const box = await created(alice, {
      entries: [
        { type: 'connection', connection_id: conn, tools: 'all' },
        { type: 'synthetic_tool', synthetic_tool_id: stool },
      ],
    });
    const conns = t.as({ token: org.token, org: org.orgId });
    expect((await conns.op('transferConnection', { params: { id: conn }, body: { user_id: bobId } })).status).toBe(200);
    expect((await alice.op('getToolbox', { params: { id: box.id } })).body.entries[0]).toMatchObject({
      connection_owner_user_id: bobId,
      connection_status: 'disconnected',
    });
    expect((await conns.op('deleteConnection', { params: { id: conn } })).status).toBe(204);
    expect((await alice.op('getToolbox', { params: { id: box.id } })).body.entries).toEqual([
      { type: 'synthetic_tool', synthetic_tool_id: stool, name: 'triage_ticket' },
    ]);
  });
});

describe('who sees which toolbox', () => {
  it('shows a member only what they created or what is shared with them; toolbox:manage sees all', async () => {
    const box = await created(owner, { entries: [{ type: 'synthetic_tool', synthetic_tool_id: stool }] });
    expectError(await bob.op('getToolbox', { params: { id: box.id } }), 404, 'not_found');
    expectError(await bob.op('listToolboxShares', { params: { id: box.id } }), 404, 'not_found');
    expect((await alice.op('getToolbox', { params: { id: box.id } })).status).toBe(200);

    const toBob = await owner.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'user', id: bobId }, level: 'use' } });
    expect(toBob.status).toBe(201);
    expect(toBob.headers.get('location')).toBe(`/toolbox/${box.id}/share/${toBob.body.id}`);
    expect(toBob.body).toMatchObject({ resource_type: 'toolbox', resource_id: box.id, principal: { type: 'user', id: bobId }, level: 'use' });
    expect((await bob.op('getToolbox', { params: { id: box.id } })).status).toBe(200);
    expect((await bob.op('listToolboxes', { query: { limit: 200 } })).body.data.map((x: { id: string }) => x.id)).toContain(box.id);
    expect((await bob.op('listToolboxShares', { params: { id: box.id } })).body.data.map((s: { id: string }) => s.id)).toEqual([toBob.body.id]);
    expectError(await dan.op('getToolbox', { params: { id: box.id } }), 404, 'not_found');

    const again = await owner.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'user', id: bobId }, level: 'edit' } });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: toBob.body.id, level: 'edit' });
    const audit = (await t.factories.auditEntries(org.orgId, 'toolbox.shared')).filter((e) => e.target_id === box.id);
    expect(audit.map((e) => e.changes.level)).toEqual([
      { from: null, to: 'use' },
      { from: 'use', to: 'edit' },
    ]);
    // An edit share lifts no permission.
    expectError(await bob.op('updateToolbox', { params: { id: box.id }, body: { name: 'Mine' } }), 403, 'missing_permission');
    expectError(await bob.op('deleteToolbox', { params: { id: box.id } }), 403, 'missing_permission');

    const toTeam = await owner.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'team', id: teamId }, level: 'use' } });
    expect((await dan.op('getToolbox', { params: { id: box.id } })).status).toBe(200);
    expect((await owner.op('revokeToolboxShare', { params: { id: box.id, aclId: toBob.body.id } })).status).toBe(204);
    expectError(await bob.op('getToolbox', { params: { id: box.id } }), 404, 'not_found');
    expectError(await owner.op('revokeToolboxShare', { params: { id: box.id, aclId: toBob.body.id } }), 404, 'not_found');
    expect((await t.factories.auditEntries(org.orgId, 'toolbox.share_revoked')).some((e) => e.target_id === box.id)).toBe(true);
    const toOrg = await owner.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
    expect((await bob.op('getToolbox', { params: { id: box.id } })).status).toBe(200);
    expect((await owner.op('listToolboxShares', { params: { id: box.id } })).body.data.map((s: { id: string }) => s.id)).toEqual([
      toTeam.body.id,
      toOrg.body.id,
    ]);
    expectError(
      await owner.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'team', id: newId('team') }, level: 'use' } }),
      400,
      'unknown_reference',
    );
  });

  it('shows the creator their own through toolbox:view alone', async () => {
    const box = await created(alice);
    const theirs = await created(owner);
    const narrowed = t.as({ token: await t.factories.token(org.orgId, aliceId, ['toolbox:view']), org: org.orgId });
    expect((await narrowed.op('getToolbox', { params: { id: box.id } })).status).toBe(200);
    expectError(await narrowed.op('getToolbox', { params: { id: theirs.id } }), 404, 'not_found');
  });

  it("refuses a curator without connection:manage sharing a toolbox that holds another member's connection (even with themselves) with 403 not_connection_owner", async () => {
    // An administrator put Bob's connection in; Alice curates the toolbox.
    const box = await created(owner, {
      entries: [
        { type: 'connection', connection_id: aliceConn, tools: 'all' },
        { type: 'connection', connection_id: bobConn, tools: ['whoami'] },
      ],
    });
    const sharesOf = () =>
      t.db.selectFrom('shares').select(['principal_id', 'level']).where('resource_type', '=', 'toolbox').where('resource_id', '=', box.id).execute();
    const toSelf = await alice.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'user', id: aliceId }, level: 'use' } });
    expectError(toSelf, 403, 'not_connection_owner');
    expect(toSelf.error?.detail).toContain(bobConn);
    expect(toSelf.error?.detail).not.toContain(aliceConn);
    expectError(
      await alice.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } }),
      403,
      'not_connection_owner',
    );
    expect(await sharesOf()).toEqual([]);
    expect((await toolboxesSharedWith(t.db, org.orgId, aliceId)).map((r) => r.id)).not.toContain(box.id);
    // Nor may a share made by someone allowed be widened by the curator.
    expect((await owner.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'team', id: teamId }, level: 'use' } })).status).toBe(201);
    expectError(
      await alice.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'team', id: teamId }, level: 'edit' } }),
      403,
      'not_connection_owner',
    );
    expect(await sharesOf()).toEqual([{ principal_id: teamId, level: 'use' }]);
    // Without Bob's connection, the curator shares it.
    expect(
      (await alice.op('updateToolbox', { params: { id: box.id }, body: { entries: [{ type: 'connection', connection_id: aliceConn, tools: 'all' }] } })).status,
    ).toBe(200);
    expect((await alice.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'user', id: aliceId }, level: 'use' } })).status).toBe(201);
  });

  it('gives the user toolboxes area the toolboxes shared with a member and their entries', async () => {
    const box = await created(owner, {
      entries: [
        { type: 'connection', connection_id: aliceConn, tools: ['get_contact'] },
        { type: 'synthetic_tool', synthetic_tool_id: stool },
      ],
    });
    const lone = await t.factories.member(org.orgId);
    const before = (await toolboxesSharedWith(t.db, org.orgId, lone)).map((r) => r.id);
    expect(before).not.toContain(box.id);
    const teamOfOne = await t.factories.team(org.orgId, `Lone ${unique()}`, [lone]);
    await owner.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'team', id: teamOfOne }, level: 'use' } });
    // Toolboxes earlier tests shared with the whole organization are among them too, oldest first.
    expect((await toolboxesSharedWith(t.db, org.orgId, lone)).map((r) => r.id)).toEqual([...before, box.id]);
    expect((await toolboxesSharedWith(t.db, org.orgId, await t.factories.member(org.orgId))).map((r) => r.id)).toEqual(before);
    const entries = await toolboxEntries(t.db, [box.id, newId('toolbox')]);
    expect(entries.get(box.id)).toEqual([
      expect.objectContaining({
        position: 0,
        type: 'connection',
        connection_id: aliceConn,
        tools: ['get_contact'],
        connector_slug: crm,
        connection_owner_user_id: aliceId,
        connection_status: 'active',
      }),
      expect.objectContaining({ position: 1, type: 'synthetic_tool', synthetic_tool_id: stool, synthetic_tool_name: 'triage_ticket' }),
    ]);
    expect([...entries.values()][1]).toEqual([]);
  });

  it('lists with filters, walking every page once', async () => {
    const admin = await t.factories.member(org.orgId, { roles: ['admin'] });
    const client = t.as({ token: await t.factories.token(org.orgId, admin), org: org.orgId });
    const other = await syntheticTool(org.orgId);
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) ids.push((await created(client, { entries: i % 2 === 0 ? [{ type: 'synthetic_tool', synthetic_tool_id: other }] : [] })).id);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await client.op('listToolboxes', { query: { limit: 2, created_by_user_id: admin, ...(cursor ? { cursor } : {}) } });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((x: { id: string }) => x.id));
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(ids);
    expect((await client.op('listToolboxes', { query: { synthetic_tool_id: other } })).body.data.map((x: { id: string }) => x.id)).toEqual([
      ids[0],
      ids[2],
      ids[4],
    ]);
    const bad = await client.op('listToolboxes', {
      query: {
        connection_id: newId('connection'),
        synthetic_tool_id: newId('syntheticTool'),
        created_by_user_id: await t.factories.user(),
      },
    });
    expectError(bad, 400, 'unknown_reference');
    expect(bad.error?.errors.map((e: { pointer: string }) => e.pointer)).toEqual(['/connection_id', '/synthetic_tool_id', '/created_by_user_id']);
  });
});

describe('update and delete', () => {
  it('replaces the entries wholesale, in the new order, recording them as {from, to} by digest', async () => {
    const second = await syntheticTool(org.orgId);
    const box = await created(alice, {
      entries: [
        { type: 'connection', connection_id: aliceConn, tools: 'all' },
        { type: 'synthetic_tool', synthetic_tool_id: stool },
      ],
    });
    const res = await alice.op('updateToolbox', {
      params: { id: box.id },
      body: {
        entries: [
          { type: 'synthetic_tool', synthetic_tool_id: second },
          { type: 'connection', connection_id: aliceConn, tools: 'all' },
        ],
      },
    });
    expect(res.status).toBe(200);
    expect(res.body.entries.map((e: Schemas['ToolboxEntry']) => (e.type === 'connection' ? e.connection_id : e.synthetic_tool_id))).toEqual([
      second,
      aliceConn,
    ]);
    expect(res.body.name).toBe(box.name);
    const audit = (await t.factories.auditEntries(org.orgId, 'toolbox.updated')).filter((e) => e.target_id === box.id);
    const entry = (e: Schemas['ToolboxEntry']) =>
      e.type === 'connection' ? { type: e.type, connection_id: e.connection_id, tools: e.tools } : { type: e.type, synthetic_tool_id: e.synthetic_tool_id };
    expect(audit[0]?.changes).toEqual({ entries: { from: auditDigest(box.entries.map(entry)), to: auditDigest(res.body.entries.map(entry)) } });
    // Leaving entries out keeps them; an empty list empties the toolbox.
    const renamed = await alice.op('updateToolbox', { params: { id: box.id }, body: { name: `${box.name} (EU)`, description: null } });
    expect(renamed.body).toMatchObject({ name: `${box.name} (EU)`, description: null });
    const audited = (await t.factories.auditEntries(org.orgId, 'toolbox.updated')).filter((e) => e.target_id === box.id);
    expect(box.description).toBeNull();
    expect(audited[1]?.changes).toEqual({ name: { from: box.name, to: `${box.name} (EU)` } });
    expect(renamed.body.entries).toHaveLength(2);
    expect((await alice.op('updateToolbox', { params: { id: box.id }, body: { entries: [] } })).body.entries).toEqual([]);
    const other = await created(alice);
    expectError(await alice.op('updateToolbox', { params: { id: other.id }, body: { name: `${box.name} (EU)` } }), 409, 'name_taken');
    const refused = await alice.op('updateToolbox', {
      params: { id: box.id },
      body: { entries: [{ type: 'connection', connection_id: bobConn, tools: 'all' }] },
    });
    expectError(refused, 400, 'unknown_reference');
    expect(refused.error?.errors).toEqual([expect.objectContaining({ pointer: '/entries/0/connection_id' })]);
    expectError(await alice.patch(`/toolbox/${box.id}`, {}), 400, 'validation_failed');
  });

  it('lets a curator keep another member’s connection with the tools it had, or fewer, but not widen it', async () => {
    const box = await created(owner, { entries: [{ type: 'connection', connection_id: bobConn, tools: ['whoami', 'echo'] }] });
    const widened = await alice.op('updateToolbox', {
      params: { id: box.id },
      body: { entries: [{ type: 'connection', connection_id: bobConn, tools: 'all' }] },
    });
    expectError(widened, 400, 'unknown_reference');
    expect(widened.error?.errors).toEqual([expect.objectContaining({ pointer: '/entries/0/tools' })]);
    const kept = await alice.op('updateToolbox', {
      params: { id: box.id },
      body: { name: `${box.name} kept`, entries: [{ type: 'connection', connection_id: bobConn, tools: ['echo', 'whoami'] }] },
    });
    expect(kept.status).toBe(200);
    expect(
      (await alice.op('updateToolbox', { params: { id: box.id }, body: { entries: [{ type: 'connection', connection_id: bobConn, tools: ['whoami'] }] } }))
        .status,
    ).toBe(200);
    // Narrowed, it cannot grow back without connection:manage.
    expectError(
      await alice.op('updateToolbox', {
        params: { id: box.id },
        body: { entries: [{ type: 'connection', connection_id: bobConn, tools: ['whoami', 'echo'] }] },
      }),
      400,
      'unknown_reference',
    );
    expect(
      (await owner.op('updateToolbox', { params: { id: box.id }, body: { entries: [{ type: 'connection', connection_id: bobConn, tools: 'all' }] } })).status,
    ).toBe(200);
  });

  it('deletes the toolbox, its entries and shares, leaving connections and synthetic tools', async () => {
    const box = await created(alice, {
      entries: [
        { type: 'connection', connection_id: aliceConn, tools: 'all' },
        { type: 'synthetic_tool', synthetic_tool_id: stool },
      ],
    });
    await alice.op('shareToolbox', { params: { id: box.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
    expect((await alice.op('deleteToolbox', { params: { id: box.id } })).status).toBe(204);
    expectError(await alice.op('getToolbox', { params: { id: box.id } }), 404, 'not_found');
    expectError(await alice.op('deleteToolbox', { params: { id: box.id } }), 404, 'not_found');
    expect(await t.db.selectFrom('shares').select('id').where('resource_type', '=', 'toolbox').where('resource_id', '=', box.id).execute()).toEqual([]);
    expect(await t.db.selectFrom('toolbox_entries').select('position').where('toolbox_id', '=', box.id).execute()).toEqual([]);
    expect(await t.db.selectFrom('connections').select('id').where('id', '=', aliceConn).executeTakeFirst()).toBeDefined();
    expect(await t.db.selectFrom('synthetic_tools').select('id').where('id', '=', stool).executeTakeFirst()).toBeDefined();
    expect((await t.factories.auditEntries(org.orgId, 'toolbox.deleted')).some((e) => e.target_id === box.id)).toBe(true);
  });
});

describe('tenant isolation', () => {
  it("answers 404 for another organization's toolbox and leaves it as it was", async () => {
    const other = await t.factories.org();
    const theirClient = t.as({ token: other.token, org: other.orgId });
    const theirs = await created(theirClient, { entries: [{ type: 'synthetic_tool', synthetic_tool_id: await syntheticTool(other.orgId) }] });
    // This organization's connection is not theirs to use.
    expectError(
      await theirClient.op('createToolbox', { body: { name: 'x', entries: [{ type: 'connection', connection_id: aliceConn, tools: 'all' }] } }),
      400,
      'unknown_reference',
    );
    expectError(await owner.op('getToolbox', { params: { id: theirs.id } }), 404, 'not_found');
    expectError(await owner.op('updateToolbox', { params: { id: theirs.id }, body: { name: 'Taken over' } }), 404, 'not_found');
    expectError(
      await owner.op('shareToolbox', { params: { id: theirs.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } }),
      404,
      'not_found',
    );
    expectError(await owner.op('deleteToolbox', { params: { id: theirs.id } }), 404, 'not_found');
    expect((await owner.op('listToolboxes', { query: { limit: 200 } })).body.data.map((x: { id: string }) => x.id)).not.toContain(theirs.id);
    expect((await theirClient.op('getToolbox', { params: { id: theirs.id } })).body).toEqual(theirs);
  });
});
