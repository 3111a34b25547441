import type { components } from '../../generated/openapi';
import { resolveUserToolbox, toolsOf } from '../../src/areas/user-toolboxes';
import { newId } from '../../src/lib/ids';
import { loadPolicy, policySubjectOf } from '../../src/access/policy';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import type { SeededOrg } from '../support/factories';
import { manyTools, startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';
import { insertTemplate, insertToolbox } from '../fixtures/user-toolboxes';

/*
 * User toolboxes over HTTP through the typed client, against real upstream MCP servers on
 * loopback (two API-key peers: a CRM and a tracker). Templates and toolboxes are written
 * straight into their tables (their operations are another branch's); connections are made
 * through the API, so their tool caches are the upstreams' real answers.
 */

type Schemas = components['schemas'];
type UserToolbox = Schemas['UserToolbox'];

const KEY_A = 'key-alice-Ut7Qw2';
const KEY_B = 'key-bob-Ut9Lp4';
const crmPeer = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' }, tools: manyTools(5, 'crm') }));
const trackerPeer = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' }, tools: manyTools(3, 'issue') }));

/** A caller: `op` sends an operation by id as one member, and get, post… send raw requests. */
type Caller = ReturnType<TestApp['as']>;

let t: TestApp;
let org: SeededOrg;
let aliceId: string;
let bobId: string;
let alice: Caller;
let bob: Caller;
let aliceConn: Caller;
let bobConn: Caller;
let crm: string;
let tracker: string;
let template: string;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  aliceId = await t.factories.member(org.orgId);
  bobId = await t.factories.member(org.orgId);
  const aliceCredential = { token: await t.factories.token(org.orgId, aliceId), org: org.orgId };
  const bobCredential = { token: await t.factories.token(org.orgId, bobId), org: org.orgId };
  alice = t.as(aliceCredential);
  bob = t.as(bobCredential);
  aliceConn = t.as(aliceCredential);
  bobConn = t.as(bobCredential);
  const apiKey = { type: 'api_key' as const, placement: 'header' as const, name: 'Authorization', value_prefix: 'Bearer ' };
  crm = await customConnector(t, org.orgId, { name: 'Acme CRM', mcp_url: `${new URL(crmPeer.peer.url).origin}/mcp`, auth: apiKey });
  tracker = await customConnector(t, org.orgId, { name: 'Tracker', mcp_url: `${new URL(trackerPeer.peer.url).origin}/mcp`, auth: apiKey });
  template = await insertTemplate(t, org.orgId, org.ownerId, {
    name: 'Sales assistant',
    entries: [
      { connector_slug: crm, tools: 'all' },
      { connector_slug: tracker, tools: ['issue_001', 'issue_002'] },
    ],
  });
});
afterAll(() => t.close());

async function connect(client: Caller, slug: string, apiKey: string, name?: string): Promise<string> {
  const res = await client.op('createConnection', { body: { connector_slug: slug, api_key: apiKey, ...(name ? { name } : {}) } });
  expect(res.status).toBe(201);
  return res.body.id;
}

async function created(client: Caller, body: Schemas['UserToolboxCreate']): Promise<UserToolbox> {
  const res = await client.op('createUserToolbox', { body });
  expect(res.status).toBe(201);
  return res.body;
}

const pointers = (error: { errors: { pointer: string }[] } | undefined) => error?.errors.map((e) => e.pointer);

describe('creating from a template', () => {
  it('copies the entries, binds the connectors to the caller’s connections, and is ready', async () => {
    const c = await connect(aliceConn, crm, KEY_A);
    const k = await connect(aliceConn, tracker, KEY_A);
    const res = await alice.op('createUserToolbox', {
      body: {
        template_id: template,
        name: 'Sales (work)',
        description: 'Work account',
        bindings: [
          { connector_slug: tracker, connection_id: k },
          { connector_slug: crm, connection_id: c },
        ],
      },
    });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/user-toolbox/${res.body.id}`);
    expect(res.body).toMatchObject({
      kind: 'template',
      name: 'Sales (work)',
      description: 'Work account',
      template_id: template,
      toolbox_id: null,
      entries: [
        { connector_slug: crm, tools: 'all' },
        { connector_slug: tracker, tools: ['issue_001', 'issue_002'] },
      ],
      bindings: [
        { connector_slug: crm, connection_id: c },
        { connector_slug: tracker, connection_id: k },
      ],
      status: 'ready',
      incomplete_connector_slugs: [],
      owner_user_id: aliceId,
      mcp_server_count: 0,
    });
    expect(res.body.id).toMatch(/^utbx_[0-7][0-9a-hjkmnp-tv-z]{25}$/);
    const audit = (await t.factories.auditEntries(org.orgId, 'user_toolbox.created')).find((e) => e.target_id === res.body.id);
    expect(audit?.changes).toMatchObject({ name: 'Sales (work)', template_id: template });
    // Later changes to the template do not reach it.
    await t.db
      .updateTable('templates')
      .set({ entries: JSON.stringify([{ connector_slug: crm, tools: ['crm_001'] }]) })
      .where('id', '=', template)
      .execute();
    try {
      expect((await alice.op('getUserToolbox', { params: { id: res.body.id } })).body.entries).toEqual(res.body.entries);
    } finally {
      await t.db
        .updateTable('templates')
        .set({ entries: JSON.stringify(res.body.entries) })
        .where('id', '=', template)
        .execute();
    }
  });

  it('defaults the name to the template’s, numbered when the caller already uses it', async () => {
    const first = await created(bob, { template_id: template });
    const second = await created(bob, { template_id: template });
    expect([first.name, second.name]).toEqual(['Sales assistant', 'Sales assistant (2)']);
    expectError(await bob.op('updateUserToolbox', { params: { id: second.id }, body: { name: 'Sales assistant' } }), 409, 'name_taken');
    expectError(await bob.op('createUserToolbox', { body: { template_id: template, name: 'Sales assistant' } }), 409, 'name_taken');
    // Another member may use the same name.
    expect((await alice.op('createUserToolbox', { body: { template_id: template, name: 'Sales assistant' } })).status).toBe(201);
  });

  it('refuses a template the caller cannot see, and one that does not exist, with 400 unknown_reference', async () => {
    const hidden = await insertTemplate(t, org.orgId, bobId, { entries: [{ connector_slug: crm, tools: 'all' }], share: false });
    for (const id of [hidden, newId('template')]) {
      const res = await alice.op('createUserToolbox', { body: { template_id: id } });
      expectError(res, 400, 'unknown_reference');
      expect(pointers(res.error)).toEqual(['/template_id']);
    }
    // Its owner sees it.
    expect((await bob.op('createUserToolbox', { body: { template_id: hidden } })).status).toBe(201);
    expectError(await alice.op('listUserToolboxes', { query: { template_id: hidden } }), 400, 'unknown_reference');
  });
});

describe('bindings', () => {
  it('refuses another member’s connection, a connection of another connector, a connector not in the template and a repeat, each by pointer', async () => {
    const mine = await connect(aliceConn, crm, KEY_A);
    const bobs = await connect(bobConn, crm, KEY_B);
    const res = await alice.op('createUserToolbox', {
      body: {
        template_id: template,
        bindings: [
          { connector_slug: crm, connection_id: bobs },
          { connector_slug: tracker, connection_id: mine },
          { connector_slug: 'not-in-template', connection_id: mine },
          { connector_slug: crm, connection_id: mine },
        ],
      },
    });
    expectError(res, 400, 'validation_failed');
    expect(pointers(res.error)?.sort()).toEqual([
      '/bindings/0/connection_id',
      '/bindings/1/connection_id',
      '/bindings/2/connector_slug',
      '/bindings/3/connector_slug',
    ]);
    expect(res.text).not.toContain(KEY_B);
  });

  it('refuses a connection that does not exist with 400 unknown_reference', async () => {
    const res = await alice.op('createUserToolbox', {
      body: { template_id: template, bindings: [{ connector_slug: crm, connection_id: newId('connection') }] },
    });
    expectError(res, 400, 'unknown_reference');
    expect(pointers(res.error)).toEqual(['/bindings/0/connection_id']);
  });

  it('is incomplete while a connector is unbound, ready once PATCH binds it; bindings are replaced wholesale', async () => {
    const c = await connect(aliceConn, crm, KEY_A);
    const k = await connect(aliceConn, tracker, KEY_A);
    const box = await created(alice, { template_id: template, name: 'Half bound', bindings: [{ connector_slug: crm, connection_id: c }] });
    expect(box).toMatchObject({ status: 'incomplete', incomplete_connector_slugs: [tracker], bindings: [{ connector_slug: crm, connection_id: c }] });
    const bound = await alice.op('updateUserToolbox', {
      params: { id: box.id },
      body: {
        bindings: [
          { connector_slug: crm, connection_id: c },
          { connector_slug: tracker, connection_id: k },
        ],
      },
    });
    expect(bound.status).toBe(200);
    expect(bound.body).toMatchObject({ status: 'ready', incomplete_connector_slugs: [] });
    expect(Date.parse(bound.body.updated_at)).toBeGreaterThanOrEqual(Date.parse(box.updated_at));
    const audit = (await t.factories.auditEntries(org.orgId, 'user_toolbox.updated')).find((e) => e.target_id === box.id);
    const sorted = (list: { connector_slug: string; connection_id: string }[]) => [...list].sort((a, b) => (a.connector_slug < b.connector_slug ? -1 : 1));
    expect(audit?.changes).toEqual({
      bindings: {
        from: [{ connector_slug: crm, connection_id: c }],
        to: sorted([
          { connector_slug: crm, connection_id: c },
          { connector_slug: tracker, connection_id: k },
        ]),
      },
    });
    const rebound = await alice.op('updateUserToolbox', {
      params: { id: box.id },
      body: { bindings: [{ connector_slug: tracker, connection_id: k }], description: 'only the tracker' },
    });
    expect(rebound.body).toMatchObject({
      status: 'incomplete',
      incomplete_connector_slugs: [crm],
      description: 'only the tracker',
      bindings: [{ connector_slug: tracker, connection_id: k }],
    });
    expectError(
      await alice.op('updateUserToolbox', { params: { id: box.id }, body: { bindings: [{ connector_slug: tracker, connection_id: c }] } }),
      400,
      'validation_failed',
    );
    // Deleting a bound connection unbinds it.
    expect((await aliceConn.op('deleteConnection', { params: { id: k } })).status).toBe(204);
    expect((await alice.op('getUserToolbox', { params: { id: box.id } })).body).toMatchObject({
      status: 'incomplete',
      incomplete_connector_slugs: [crm, tracker],
      bindings: [],
    });
  });

  it('stops using a connection that changes hands', async () => {
    const c = await connect(aliceConn, crm, KEY_A);
    const box = await created(alice, { template_id: template, name: 'Transferred', bindings: [{ connector_slug: crm, connection_id: c }] });
    expect((await aliceConn.op('transferConnection', { params: { id: c }, body: { user_id: bobId } })).status).toBe(200);
    const after = (await alice.op('getUserToolbox', { params: { id: box.id } })).body;
    expect(after.bindings).toEqual([]);
    expect(after.incomplete_connector_slugs).toEqual([crm, tracker]);
  });
});

describe('status follows the connections live', () => {
  it('offers nothing of a toolbox entry whose connection awaits its new owner’s acceptance of a transfer, until they accept it', async () => {
    const giver = t.as({ token: await t.factories.token(org.orgId, await t.factories.member(org.orgId)), org: org.orgId });
    const takerId = await t.factories.member(org.orgId);
    const taker = t.as({ token: await t.factories.token(org.orgId, takerId), org: org.orgId });
    const readerId = await t.factories.member(org.orgId);
    const reader = t.as({ token: await t.factories.token(org.orgId, readerId), org: org.orgId });
    const c = await connect(giver, crm, KEY_A);
    const toolbox = await insertToolbox(t, org.orgId, { entries: [{ connection_id: c, tools: ['crm_001'] }], principal: { type: 'user', id: readerId } });
    const dynId = `utbx_dyn_tbx_${toolbox.slice(4)}`;
    const offered = async () => {
      const box = (await resolveUserToolbox(t.db, org.orgId, readerId, dynId))!;
      return (await toolsOf(t.deps, box, await loadPolicy(t.db, await policySubjectOf(t.db, org.orgId, readerId), new Date()))).map((tool) => tool.name);
    };
    expect(await offered()).toEqual([`${crm}__crm_001`]);
    expect((await giver.op('transferConnection', { params: { id: c }, body: { user_id: takerId } })).status).toBe(200);
    expect(await offered()).toEqual([]);
    expect((await reader.op('getUserToolbox', { params: { id: dynId } })).body).toMatchObject({ status: 'incomplete', incomplete_connector_slugs: [crm] });
    expect((await taker.op('acceptConnection', { params: { id: c } })).status).toBe(200);
    expect(await offered()).toEqual([`${crm}__crm_001`]);
    expect((await reader.op('getUserToolbox', { params: { id: dynId } })).body).toMatchObject({ status: 'ready', incomplete_connector_slugs: [] });
  });

  it('turns incomplete when a bound connection needs reauthentication upstream, and ready again after reconnecting', async () => {
    // A member of her own, so that no other connection of hers keeps utbx_dyn_all's connector active.
    const carolId = await t.factories.member(org.orgId);
    const credential = { token: await t.factories.token(org.orgId, carolId), org: org.orgId };
    const carol = t.as(credential);
    const carolConn = t.as(credential);
    const KEY_C = 'key-carol-Rr5Tg1';
    crmPeer.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob', [KEY_C]: 'carol' });
    try {
      const c = await connect(carolConn, crm, KEY_C);
      const k = await connect(carolConn, tracker, KEY_A);
      const box = await created(carol, {
        template_id: template,
        bindings: [
          { connector_slug: crm, connection_id: c },
          { connector_slug: tracker, connection_id: k },
        ],
      });
      expect(box.status).toBe('ready');
      expect((await carol.op('getUserToolbox', { params: { id: 'utbx_dyn_all' } })).body).toMatchObject({ status: 'ready', incomplete_connector_slugs: [] });
      // The upstream stops accepting Carol's key: checking it again marks the connection needs_reauth.
      crmPeer.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob' });
      expectError(await carolConn.op('reconnectConnection', { params: { id: c } }), 409, 'connection_needs_reauth');
      expect((await carol.op('getUserToolbox', { params: { id: box.id } })).body).toMatchObject({ status: 'incomplete', incomplete_connector_slugs: [crm] });
      expect((await carol.op('getUserToolbox', { params: { id: 'utbx_dyn_all' } })).body).toMatchObject({
        status: 'incomplete',
        incomplete_connector_slugs: [crm],
      });
      const listed = (await carol.op('listUserToolboxes')).body.data.find((b: UserToolbox) => b.id === box.id);
      expect(listed).toMatchObject({ status: 'incomplete', incomplete_connector_slugs: [crm] });
      crmPeer.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob', [KEY_C]: 'carol' });
      expect((await carolConn.op('reconnectConnection', { params: { id: c }, body: { api_key: KEY_C } })).status).toBe(200);
      expect((await carol.op('getUserToolbox', { params: { id: box.id } })).body).toMatchObject({ status: 'ready', incomplete_connector_slugs: [] });
    } finally {
      crmPeer.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob' });
    }
  });
});

describe('dynamic user toolboxes', () => {
  let daveId: string;
  let dave: Caller;
  let shared: string;
  let viaTeam: string;
  let unshared: string;
  let stored: UserToolbox;

  beforeAll(async () => {
    daveId = await t.factories.member(org.orgId);
    const credential = { token: await t.factories.token(org.orgId, daveId), org: org.orgId };
    dave = t.as(credential);
    const daveConn = t.as(credential);
    const c = await connect(daveConn, crm, KEY_A);
    stored = await created(dave, { template_id: template, bindings: [{ connector_slug: crm, connection_id: c }] });
    const bobs = await connect(bobConn, tracker, KEY_B);
    shared = await insertToolbox(t, org.orgId, {
      name: 'Support desk',
      entries: [{ connection_id: bobs, tools: 'all' }],
      principal: { type: 'user', id: daveId },
    });
    const teamId = await t.factories.team(org.orgId, 'Support', [daveId]);
    viaTeam = await insertToolbox(t, org.orgId, { name: 'Team tools', entries: [], principal: { type: 'team', id: teamId } });
    unshared = await insertToolbox(t, org.orgId, { name: 'Not for Dave', entries: [], principal: { type: 'user', id: bobId } });
  });

  const dyn = (toolboxId: string) => `utbx_dyn_tbx_${toolboxId.slice(4)}`;

  it('lists the stored ones, then utbx_dyn_all, then one per toolbox shared with the caller, each once across pages', async () => {
    const all = await dave.op('listUserToolboxes');
    expect(all.status).toBe(200);
    expect(all.body.data.map((b: UserToolbox) => b.id)).toEqual([stored.id, 'utbx_dyn_all', dyn(shared), dyn(viaTeam)]);
    expect(all.body.data[1]).toMatchObject({
      kind: 'dynamic',
      name: 'All my connections',
      entries: [],
      bindings: [],
      template_id: null,
      toolbox_id: null,
      owner_user_id: daveId,
      status: 'ready',
    });
    expect(all.body.data[2]).toMatchObject({
      kind: 'dynamic',
      name: 'Support desk',
      description: 'For tests.',
      toolbox_id: shared,
      status: 'ready',
      mcp_server_count: 0,
    });
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let i = 0; i < 10; i += 1) {
      const page = await dave.op('listUserToolboxes', { query: { limit: 1, ...(cursor ? { cursor } : {}) } });
      expect(page.status).toBe(200);
      seen.push(...page.body.data.map((b: UserToolbox) => b.id));
      cursor = page.body.next_cursor ?? undefined;
      if (!cursor) break;
    }
    expect(seen).toEqual([stored.id, 'utbx_dyn_all', dyn(shared), dyn(viaTeam)]);
    expect((await dave.op('listUserToolboxes', { query: { kind: 'dynamic' } })).body.data.map((b: UserToolbox) => b.id)).toEqual([
      'utbx_dyn_all',
      dyn(shared),
      dyn(viaTeam),
    ]);
    expect((await dave.op('listUserToolboxes', { query: { kind: 'template' } })).body.data.map((b: UserToolbox) => b.id)).toEqual([stored.id]);
    expect((await dave.op('listUserToolboxes', { query: { template_id: template } })).body.data.map((b: UserToolbox) => b.id)).toEqual([stored.id]);
    expectError(await dave.op('listUserToolboxes', { query: { cursor: 'bm9wZQ' } }), 400, 'invalid_cursor');
  });

  it('reads a dynamic one; a toolbox not shared with the caller is a 404', async () => {
    const res = await dave.op('getUserToolbox', { params: { id: dyn(shared) } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: dyn(shared), toolbox_id: shared, name: 'Support desk' });
    expect((await dave.op('getUserToolbox', { params: { id: 'utbx_dyn_all' } })).body.id).toBe('utbx_dyn_all');
    expectError(await dave.op('getUserToolbox', { params: { id: dyn(unshared) } }), 404, 'not_found');
    expect((await bob.op('getUserToolbox', { params: { id: dyn(unshared) } })).status).toBe(200);
  });

  it('refuses to change or delete a dynamic one with 400 dynamic_toolbox_immutable', async () => {
    for (const id of ['utbx_dyn_all', dyn(shared)]) {
      expectError(await dave.op('updateUserToolbox', { params: { id }, body: { name: 'Mine now' } }), 400, 'dynamic_toolbox_immutable');
      expectError(await dave.op('deleteUserToolbox', { params: { id } }), 400, 'dynamic_toolbox_immutable');
    }
    expect((await dave.op('getUserToolbox', { params: { id: dyn(shared) } })).body.name).toBe('Support desk');
  });
});

describe('whose user toolboxes', () => {
  it('answers another member’s user toolbox with 404 and never lists it', async () => {
    const box = await created(bob, { template_id: template, name: 'Bob only' });
    expectError(await alice.op('getUserToolbox', { params: { id: box.id } }), 404, 'not_found');
    expectError(await alice.op('updateUserToolbox', { params: { id: box.id }, body: { name: 'Taken over' } }), 404, 'not_found');
    expectError(await alice.op('deleteUserToolbox', { params: { id: box.id } }), 404, 'not_found');
    // Not even the organization's owner, with every permission.
    const owner = t.as({ token: org.token, org: org.orgId });
    expectError(await owner.op('getUserToolbox', { params: { id: box.id } }), 404, 'not_found');
    expect((await alice.op('listUserToolboxes', { query: { limit: 200 } })).body.data.some((b: UserToolbox) => b.id === box.id)).toBe(false);
    expect((await bob.op('getUserToolbox', { params: { id: box.id } })).body.name).toBe('Bob only');
  });

  it('answers another organization’s user toolbox with 404, and leaves it as it was', async () => {
    const other = await t.factories.org();
    const otherTemplate = await insertTemplate(t, other.orgId, other.ownerId, { entries: [{ connector_slug: 'acme-crm', tools: 'all' }] });
    const theirs = t.as({ token: other.token, org: other.orgId });
    const box = await created(theirs, { template_id: otherTemplate });
    const owner = t.as({ token: org.token, org: org.orgId });
    expectError(await owner.op('getUserToolbox', { params: { id: box.id } }), 404, 'not_found');
    expectError(await owner.op('deleteUserToolbox', { params: { id: box.id } }), 404, 'not_found');
    // Their template is not ours either.
    expectError(await owner.op('createUserToolbox', { body: { template_id: otherTemplate } }), 400, 'unknown_reference');
    expect((await theirs.op('getUserToolbox', { params: { id: box.id } })).body).toEqual(box);
  });

  it('deletes a stored one with 204, recording the audit entry; the connections stay', async () => {
    const c = await connect(aliceConn, crm, KEY_A);
    const box = await created(alice, { template_id: template, name: 'Short lived', bindings: [{ connector_slug: crm, connection_id: c }] });
    expect((await alice.op('deleteUserToolbox', { params: { id: box.id } })).status).toBe(204);
    expectError(await alice.op('getUserToolbox', { params: { id: box.id } }), 404, 'not_found');
    expectError(await alice.op('deleteUserToolbox', { params: { id: box.id } }), 404, 'not_found');
    expect((await aliceConn.op('getConnection', { params: { id: c } })).status).toBe(200);
    const audit = (await t.factories.auditEntries(org.orgId, 'user_toolbox.deleted')).find((e) => e.target_id === box.id);
    expect(audit?.changes).toMatchObject({ name: 'Short lived', mcp_servers: [] });
  });
});

describe('through the template and toolbox operations', () => {
  it('makes a user toolbox from a template once it is shared, and a dynamic one per toolbox share, gone when the share is revoked', async () => {
    const owner = t.as({ token: org.token, org: org.orgId });
    const frankId = await t.factories.member(org.orgId);
    const credential = { token: await t.factories.token(org.orgId, frankId), org: org.orgId };
    const frank = t.as(credential);
    const frankConn = t.as(credential);
    const tpl = await owner.post('/template', { name: 'CRM only', entries: [{ connector_slug: crm, tools: 'all' }] });
    expect(tpl.status).toBe(201);
    expectError(await frank.op('createUserToolbox', { body: { template_id: tpl.body.id } }), 400, 'unknown_reference');
    expect((await owner.post(`/template/${tpl.body.id}/share`, { principal: { type: 'user', id: frankId }, level: 'use' })).status).toBe(201);
    const c = await connect(frankConn, crm, KEY_A);
    const box = await created(frank, { template_id: tpl.body.id, bindings: [{ connector_slug: crm, connection_id: c }] });
    expect(box).toMatchObject({ name: 'CRM only', entries: [{ connector_slug: crm, tools: 'all' }], status: 'ready' });
    // Deleting the template leaves the user toolbox with its copy.
    expect((await owner.delete(`/template/${tpl.body.id}`)).status).toBe(204);
    expect((await frank.op('getUserToolbox', { params: { id: box.id } })).body).toMatchObject({
      template_id: null,
      entries: [{ connector_slug: crm, tools: 'all' }],
      status: 'ready',
    });

    const teamId = await t.factories.team(org.orgId, 'Frank’s team', [frankId]);
    const tbx = await owner.post('/toolbox', { name: 'Team CRM', entries: [{ type: 'connection', connection_id: c, tools: ['crm_001'] }] });
    expect(tbx.status).toBe(201);
    const dynId = `utbx_dyn_tbx_${(tbx.body.id as string).slice(4)}`;
    expectError(await frank.op('getUserToolbox', { params: { id: dynId } }), 404, 'not_found');
    const share = await owner.post(`/toolbox/${tbx.body.id}/share`, { principal: { type: 'team', id: teamId }, level: 'use' });
    expect(share.status).toBe(201);
    expect((await frank.op('listUserToolboxes')).body.data.map((b: UserToolbox) => b.id)).toEqual([box.id, 'utbx_dyn_all', dynId]);
    const dynamic = (await resolveUserToolbox(t.db, org.orgId, frankId, dynId))!;
    const policy = await loadPolicy(t.db, await policySubjectOf(t.db, org.orgId, frankId), new Date());
    expect((await toolsOf(t.deps, dynamic, policy)).map((tool) => tool.name)).toEqual([`${crm}__crm_001`]);
    expect((await owner.delete(`/toolbox/${tbx.body.id}/share/${share.body.id}`)).status).toBe(204);
    expectError(await frank.op('getUserToolbox', { params: { id: dynId } }), 404, 'not_found');
    expect(await resolveUserToolbox(t.db, org.orgId, frankId, dynId)).toBeNull();
    // A member who is suspended has no user toolboxes for the MCP endpoint to serve.
    expect(await resolveUserToolbox(t.db, org.orgId, frankId, box.id)).not.toBeNull();
    await t.db.updateTable('memberships').set({ status: 'suspended' }).where('org_id', '=', org.orgId).where('user_id', '=', frankId).execute();
    expect(await resolveUserToolbox(t.db, org.orgId, frankId, box.id)).toBeNull();
    expect(await resolveUserToolbox(t.db, org.orgId, frankId, 'utbx_dyn_all')).toBeNull();
  });
});

describe('toolsOf', () => {
  it('offers the cached tools of the bound connections by selection, named <connector>__<tool>, minus what a deny restriction hides', async () => {
    const erinId = await t.factories.member(org.orgId);
    const credential = { token: await t.factories.token(org.orgId, erinId), org: org.orgId };
    const erin = t.as(credential);
    const erinConn = t.as(credential);
    const c = await connect(erinConn, crm, KEY_A);
    const k = await connect(erinConn, tracker, KEY_A);
    const box = await created(erin, {
      template_id: template,
      bindings: [
        { connector_slug: crm, connection_id: c },
        { connector_slug: tracker, connection_id: k },
      ],
    });
    const resolved = (await resolveUserToolbox(t.db, org.orgId, erinId, box.id))!;
    const policyNow = async () => loadPolicy(t.db, await policySubjectOf(t.db, org.orgId, erinId), new Date());

    // From the caches alone: the upstreams are not asked.
    const before = crmPeer.peer.seen.length + trackerPeer.peer.seen.length;
    const names = (await toolsOf(t.deps, resolved, await policyNow())).map((tool) => tool.name);
    expect(crmPeer.peer.seen.length + trackerPeer.peer.seen.length).toBe(before);
    const crmTools = ['whoami', 'echo', 'crm_001', 'crm_002', 'crm_003', 'crm_004', 'crm_005'].map((n) => `${crm}__${n}`);
    expect(names.sort()).toEqual([...crmTools, `${tracker}__issue_001`, `${tracker}__issue_002`].sort());

    // A deny on crm_00* hides those (for everyone); another member's restriction does not apply.
    const denyIds = [newId('restriction'), newId('restriction')];
    await t.db
      .insertInto('restrictions')
      .values([
        {
          id: denyIds[0]!,
          org_id: org.orgId,
          name: 'No CRM writes',
          match_connector_slug: crm,
          match_tool_pattern: 'crm_00*',
          effect: 'deny',
          applies_to_everyone: true,
          is_active: true,
        },
        {
          id: denyIds[1]!,
          org_id: org.orgId,
          name: 'Not for Bob',
          match_connector_slug: tracker,
          match_tool_pattern: null,
          effect: 'deny',
          applies_to_everyone: false,
          applies_to_user_ids: [bobId],
          is_active: true,
        },
      ])
      .execute();
    try {
      const filtered = await toolsOf(t.deps, resolved, await policyNow());
      expect(filtered.map((tool) => tool.name).sort()).toEqual([`${crm}__echo`, `${crm}__whoami`, `${tracker}__issue_001`, `${tracker}__issue_002`].sort());
      expect(filtered.find((tool) => tool.name === `${tracker}__issue_001`)).toMatchObject({
        source: { kind: 'upstream', connection_id: k, connector_slug: tracker, tool: 'issue_001' },
        verdict: { listed: true, callable: true },
      });
      const all = (await resolveUserToolbox(t.db, org.orgId, erinId, 'utbx_dyn_all'))!;
      const allNames = (await toolsOf(t.deps, all, await policyNow())).map((tool) => tool.name);
      expect(allNames).toContain(`${tracker}__whoami`);
      expect(allNames).not.toContain(`${crm}__crm_001`);
      expect((await policyNow()).evaluate({ kind: 'upstream', connector_slug: crm, tool: 'crm_001' }).listed).toBe(false);

      // A list fetched again is read again (the parsed lists kept in process follow fetched_at).
      const fresh = [
        { name: 'crm_new', title: null, description: 'New upstream tool.', input_schema: { type: 'object' }, output_schema: null, annotations: null },
      ];
      await t.db
        .updateTable('connection_tools')
        .set({ tools: JSON.stringify(fresh), fetched_at: new Date(Date.now() + 1000) })
        .where('connection_id', '=', c)
        .execute();
      expect((await toolsOf(t.deps, resolved, await policyNow())).map((tool) => tool.name).sort()).toEqual(
        [`${crm}__crm_new`, `${tracker}__issue_001`, `${tracker}__issue_002`].sort(),
      );
      await t.db.deleteFrom('connection_tools').where('connection_id', '=', c).execute();
      expect((await toolsOf(t.deps, resolved, await policyNow())).map((tool) => tool.name).sort()).toEqual([`${tracker}__issue_001`, `${tracker}__issue_002`]);

      // Only active connections' tools are offered.
      await t.db.updateTable('connections').set({ status: 'needs_reauth', status_reason: 'credentials_rejected' }).where('id', '=', k).execute();
      const afterReauth = (await resolveUserToolbox(t.db, org.orgId, erinId, box.id))!;
      expect(afterReauth.status).toBe('incomplete');
      expect(await toolsOf(t.deps, afterReauth, await policyNow())).toEqual([]);
      expect(await resolveUserToolbox(t.db, org.orgId, bobId, box.id)).toBeNull();
      expect((await erin.op('getUserToolbox', { params: { id: box.id } })).body.status).toBe('incomplete');
    } finally {
      await t.db.deleteFrom('restrictions').where('id', 'in', denyIds).execute();
    }
  });

  it('offers each name once in utbx_dyn_all when two connections serve one connector: the oldest active one’s', async () => {
    const ginaId = await t.factories.member(org.orgId);
    const ginaConn = t.as({ token: await t.factories.token(org.orgId, ginaId), org: org.orgId });
    const first = await connect(ginaConn, crm, KEY_A, 'CRM (work)');
    const second = await connect(ginaConn, crm, KEY_B, 'CRM (personal)');
    const policy = await loadPolicy(t.db, await policySubjectOf(t.db, org.orgId, ginaId), new Date());
    const offered = await toolsOf(t.deps, (await resolveUserToolbox(t.db, org.orgId, ginaId, 'utbx_dyn_all'))!, policy);
    expect(offered.map((tool) => tool.name)).toHaveLength(new Set(offered.map((tool) => tool.name)).size);
    expect(offered.find((tool) => tool.name === `${crm}__whoami`)?.source).toMatchObject({ connection_id: first });
    await t.db.updateTable('connections').set({ status: 'needs_reauth', status_reason: 'credentials_rejected' }).where('id', '=', first).execute();
    const box = (await resolveUserToolbox(t.db, org.orgId, ginaId, 'utbx_dyn_all'))!;
    // The other connection still serves the connector: not incomplete.
    expect([box.status, box.incompleteConnectorSlugs]).toEqual(['ready', []]);
    expect((await toolsOf(t.deps, box, policy)).find((tool) => tool.name === `${crm}__whoami`)?.source).toMatchObject({ connection_id: second });
  });

  it('includes a toolbox’s synthetic tools under their names', async () => {
    const stoolId = newId('syntheticTool');
    await t.db
      .insertInto('synthetic_tools')
      .values({
        id: stoolId,
        org_id: org.orgId,
        name: 'triage_ticket',
        description: 'Triage a ticket.',
        input_schema: JSON.stringify({ type: 'object' }),
        output_schema: null,
        steps: JSON.stringify([{ id: 'find', tool: { connector_slug: tracker, connection_id: null, name: 'issue_001' }, arguments: {}, on_error: 'fail' }]),
        output: JSON.stringify({}),
      })
      .execute();
    const bobs = await connect(bobConn, crm, KEY_B);
    const toolbox = await insertToolbox(t, org.orgId, {
      name: 'Triage',
      entries: [{ connection_id: bobs, tools: ['crm_005'] }, { synthetic_tool_id: stoolId }],
      principal: { type: 'organization', id: org.orgId },
    });
    const box = (await resolveUserToolbox(t.db, org.orgId, aliceId, `utbx_dyn_tbx_${toolbox.slice(4)}`))!;
    const policy = await loadPolicy(t.db, await policySubjectOf(t.db, org.orgId, aliceId), new Date());
    const tools = await toolsOf(t.deps, box, policy);
    expect(tools.map((tool) => tool.name)).toEqual([`${crm}__crm_005`, 'triage_ticket']);
    expect(tools[1]).toMatchObject({
      description: 'Triage a ticket.',
      source: { kind: 'synthetic', synthetic_tool_id: stoolId, steps: [{ connector_slug: tracker, tool: 'issue_001' }] },
    });
  });
});
