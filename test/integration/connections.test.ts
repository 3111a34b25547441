import { startTestApp, type TestApp } from '../support/app';
import { allToolNames, connectionClient, eventsOf, expectError } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { manyTools, startApiKeyUpstream, startEverythingServer, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';
import { deleteConnector, findConnector, updateConnector } from '../../src/areas/connectors/connectors.repo';
import type { ConnectorContent } from '../../src/areas/connectors/content';

/*
 * Connections with API keys and without auth, over HTTP against the real app, with real
 * upstream MCP servers on loopback: the peers' API-key server (which records the credential
 * of every request) and the published reference server-everything, over Streamable HTTP and
 * SSE. OAuth connections are in connections-oauth.test.ts.
 */

const KEY_A = 'key-alice-7Hq2k9XwPz';
const KEY_B = 'key-bob-Zr81mQp3Vd';
const CONNECTION_ID = /^conn_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

const header = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' }, tools: manyTools(23), pageSize: 7 }));
const query = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_A]: 'alice' }, placement: { placement: 'query', name: 'api_key' }, transport: 'sse' }));
/** Tool names as long as a connection keeps (512 characters): their cursors are long too. */
const LONG = 'ü'.repeat(300);
const longNames = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_A]: 'alice' }, tools: manyTools(3, LONG) }));
const everythingHttp = useUpstream(() => startEverythingServer('streamableHttp'));
const everythingSse = useUpstream(() => startEverythingServer('sse'));

let t: TestApp;
let org: SeededOrg;
let aliceId: string;
let bobId: string;
let alice: ReturnType<typeof connectionClient>;
let bob: ReturnType<typeof connectionClient>;
let owner: ReturnType<typeof connectionClient>;
let crm: string;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  aliceId = await t.factories.member(org.orgId);
  bobId = await t.factories.member(org.orgId);
  alice = connectionClient(t, { token: await t.factories.token(org.orgId, aliceId), org: org.orgId });
  bob = connectionClient(t, { token: await t.factories.token(org.orgId, bobId), org: org.orgId });
  owner = connectionClient(t, { token: org.token, org: org.orgId });
  crm = await customConnector(t, org.orgId, {
    name: 'Acme CRM',
    mcp_url: `${new URL(header.peer.url).origin}/mcp`,
    auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
  });
});
afterAll(() => t.close());

async function connect(client: ReturnType<typeof connectionClient>, apiKey: string, slug = crm) {
  const res = await client.create({ connector_slug: slug, api_key: apiKey });
  expect(res.status).toBe(201);
  return res.body;
}

describe('api_key connections', () => {
  it('checks the key upstream, stores it sealed, and answers the connection without it', async () => {
    const before = header.peer.seen.length;
    const res = await alice.create({ connector_slug: crm, api_key: KEY_A });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/connection/${res.body.id}`);
    expect(res.body).toMatchObject({
      connector_slug: crm,
      name: 'Acme CRM',
      owner_user_id: aliceId,
      status: 'active',
      status_reason: null,
      auth_type: 'api_key',
      has_credentials: true,
      scopes: [],
      authorize_url: null,
      authorize_expires_at: null,
      last_error: null,
    });
    expect(res.body.id).toMatch(CONNECTION_ID);
    expect(res.body.last_used_at).not.toBeNull();
    expect(res.text).not.toContain(KEY_A);
    // initialize and tools/list reached the upstream with Alice's key.
    const seen = header.peer.seen.slice(before);
    expect(seen.map((s) => s.rpc).join(',')).toContain('initialize');
    expect(seen.every((s) => s.credential === KEY_A && s.accepted)).toBe(true);
    const row = await t.db.selectFrom('connections').selectAll().where('id', '=', res.body.id).executeTakeFirstOrThrow();
    expect(row.credentials_enc).not.toContain(KEY_A);
    const created = (await eventsOf(t, org.orgId, 'connection.created')).find((e) => e.payload.connection.id === res.body.id);
    expect(created?.payload).toEqual({ connection: { id: res.body.id, name: 'Acme CRM', connector_slug: crm, owner_user_id: aliceId, status: 'active' } });
    const audit = await t.factories.auditEntries(org.orgId, 'connection.created');
    expect(audit.find((e) => e.target_id === res.body.id)?.changes).not.toHaveProperty('api_key');
  });

  it("sends each member's own key: Alice's calls carry Alice's, never Bob's", async () => {
    const a = await connect(alice, KEY_A);
    const b = await connect(bob, KEY_B);
    await t.db.deleteFrom('connection_tools').execute();
    const mark = header.peer.seen.length;
    expect((await alice.tools(a.id)).status).toBe(200);
    const aliceSeen = header.peer.seen.slice(mark);
    expect(aliceSeen.length).toBeGreaterThan(0);
    expect(aliceSeen.every((s) => s.credential === KEY_A && s.member === 'alice')).toBe(true);
    const mark2 = header.peer.seen.length;
    expect((await bob.tools(b.id)).status).toBe(200);
    expect(header.peer.seen.slice(mark2).every((s) => s.credential === KEY_B && s.member === 'bob')).toBe(true);
  });

  it('refuses a key the upstream refuses with 400 upstream_credentials_rejected, storing nothing', async () => {
    const count = async () => (await t.db.selectFrom('connections').select('id').where('org_id', '=', org.orgId).execute()).length;
    const before = await count();
    const res = await alice.create({ connector_slug: crm, api_key: 'not-a-key' });
    expectError(res, 400, 'upstream_credentials_rejected');
    expect(res.text).not.toContain('not-a-key');
    expect(await count()).toBe(before);
  });

  it('places the key in the query when the connector says so, over SSE', async () => {
    const slug = await customConnector(t, org.orgId, {
      mcp_url: `${new URL(query.peer.url).origin}/sse`,
      transport: 'sse',
      auth: { type: 'api_key', placement: 'query', name: 'api_key', value_prefix: null },
    });
    const mark = query.peer.seen.length;
    const created = await connect(alice, KEY_A, slug);
    expect(created.status).toBe('active');
    const seen = query.peer.seen.slice(mark);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.every((s) => s.credential === KEY_A)).toBe(true);
    expectError(await bob.create({ connector_slug: slug, api_key: KEY_B }), 400, 'upstream_credentials_rejected');
  });

  it('refuses members that do not fit the auth type, and connectors the caller cannot see', async () => {
    const bad = await alice.post('/connection', { connector_slug: crm, scopes: ['x'], return_to: '/x' });
    expectError(bad, 400, 'validation_failed');
    expect(bad.body.errors.map((e: { pointer: string }) => e.pointer).sort()).toEqual(['/api_key', '/return_to', '/scopes']);
    const hidden = await customConnector(t, org.orgId, { mcp_url: header.peer.url, auth: { type: 'none' }, share: false });
    const unseen = await alice.create({ connector_slug: hidden });
    expectError(unseen, 400, 'unknown_reference');
    expect(unseen.body.errors).toEqual([expect.objectContaining({ in: 'body', pointer: '/connector_slug' })]);
  });

  it('answers 502 upstream_unavailable when the upstream is down, storing nothing', async () => {
    header.peer.down('close');
    try {
      const res = await alice.create({ connector_slug: crm, api_key: KEY_A });
      expectError(res, 502, 'upstream_unavailable');
    } finally {
      header.peer.up();
    }
  });
});

describe('who sees which connection', () => {
  it('shows members their own, and managers everyone’s without authorize_url', async () => {
    const a = await connect(alice, KEY_A);
    const b = await connect(bob, KEY_B);
    expectError(await bob.read(a.id), 404, 'not_found');
    expectError(await bob.tools(a.id), 404, 'not_found');
    expectError(await bob.remove(a.id), 404, 'not_found');
    const bobs = await bob.list({ limit: 200 });
    expect(bobs.body.data.every((c: { owner_user_id: string }) => c.owner_user_id === bobId)).toBe(true);
    expect(bobs.body.data.map((c: { id: string }) => c.id)).toContain(b.id);
    expectError(await bob.list({ owner_user_id: aliceId }), 403, 'missing_permission');
    // The organization's owner holds connection:manage.
    expect((await owner.read(a.id)).body.owner_user_id).toBe(aliceId);
    const alices = await owner.list({ owner_user_id: aliceId, limit: 200 });
    expect(alices.body.data.map((c: { id: string }) => c.id)).toContain(a.id);
    expect(alices.body.data.every((c: { owner_user_id: string }) => c.owner_user_id === aliceId)).toBe(true);
    expectError(await owner.tools(a.id), 403, 'not_connection_owner');
    expectError(await owner.reconnect(a.id), 403, 'not_connection_owner');
    const notMember = await owner.list({ owner_user_id: await t.factories.user() });
    expectError(notMember, 400, 'unknown_reference');
    expectError(await owner.list({ connector_slug: 'no-such-connector' }), 400, 'unknown_reference');
  });

  it('walks every page of a list once, and filters by connector and status', async () => {
    const ids = new Set<string>();
    let cursor: string | undefined;
    do {
      const res = await owner.list({ limit: 2, ...(cursor ? { cursor } : {}) });
      expect(res.status).toBe(200);
      for (const c of res.body.data) {
        expect(ids.has(c.id)).toBe(false);
        ids.add(c.id);
      }
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    const all = await t.db.selectFrom('connections').select('id').where('org_id', '=', org.orgId).execute();
    expect(ids.size).toBe(all.length);
    const active = await owner.list({ connector_slug: crm, status: 'active', limit: 200 });
    expect(active.body.data.every((c: { connector_slug: string; status: string }) => c.connector_slug === crm && c.status === 'active')).toBe(true);
  });

  it('is 404 in another organization, which it stays unchanged for', async () => {
    const a = await connect(alice, KEY_A);
    const other = await t.factories.org();
    const stranger = connectionClient(t, { token: other.token, org: other.orgId });
    expectError(await stranger.read(a.id), 404, 'not_found');
    expectError(await stranger.rename(a.id, 'Mine now'), 404, 'not_found');
    expectError(await stranger.remove(a.id), 404, 'not_found');
    expectError(await stranger.tools(a.id), 404, 'not_found');
    expect((await alice.read(a.id)).body.name).toBe('Acme CRM');
  });
});

describe('rename and delete', () => {
  it('renames with an audit entry, and deletes with an event', async () => {
    const a = await connect(alice, KEY_A);
    const renamed = await alice.rename(a.id, 'CRM (sales)');
    expect(renamed.status).toBe(200);
    expect(renamed.body.name).toBe('CRM (sales)');
    expect((await t.factories.auditEntries(org.orgId, 'connection.updated')).some((e) => e.target_id === a.id)).toBe(true);
    expect((await alice.remove(a.id)).status).toBe(204);
    expectError(await alice.read(a.id), 404, 'not_found');
    expectError(await alice.remove(a.id), 404, 'not_found');
    const deleted = (await eventsOf(t, org.orgId, 'connection.deleted')).find((e) => e.payload.connection.id === a.id);
    expect(deleted?.payload.connection).toMatchObject({ id: a.id, name: 'CRM (sales)', owner_user_id: aliceId });
    expect((await t.factories.auditEntries(org.orgId, 'connection.deleted')).some((e) => e.target_id === a.id)).toBe(true);
  });
});

describe('reconnect', () => {
  it('replaces a key once the upstream accepts it; a stored key refused makes the connection needs_reauth', async () => {
    const a = await connect(alice, KEY_A);
    expectError(await alice.reconnect(a.id, { api_key: 'wrong' }), 400, 'upstream_credentials_rejected');
    expect((await alice.read(a.id)).body.status).toBe('active');
    header.peer.setKeys({ [KEY_B]: 'bob' });
    try {
      const refused = await alice.reconnect(a.id);
      expectError(refused, 409, 'connection_needs_reauth');
      const after = (await alice.read(a.id)).body;
      expect(after).toMatchObject({ status: 'needs_reauth', status_reason: 'credentials_rejected', has_credentials: true });
      expect(after.last_error).toMatch(/refused/);
      const events = (await eventsOf(t, org.orgId, 'connection.needs_reauth')).filter((e) => e.payload.connection.id === a.id);
      expect(events).toHaveLength(1);
      expect(events[0]?.actor_type).toBe('system');
      // Again: no second event.
      expectError(await alice.reconnect(a.id), 409, 'connection_needs_reauth');
      expect((await eventsOf(t, org.orgId, 'connection.needs_reauth')).filter((e) => e.payload.connection.id === a.id)).toHaveLength(1);
      expectError(await alice.tools(a.id), 409, 'connection_needs_reauth');
      header.peer.setKeys({ [KEY_A]: 'alice-rotated', [KEY_B]: 'bob' });
      const back = await alice.reconnect(a.id, { api_key: KEY_A });
      expect(back.status).toBe(200);
      expect(back.body).toMatchObject({ status: 'active', status_reason: null, last_error: null });
      expect((await t.factories.auditEntries(org.orgId, 'connection.reconnected')).some((e) => e.target_id === a.id)).toBe(true);
    } finally {
      header.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob' });
    }
  });

  it('refuses members of another auth type', async () => {
    const a = await connect(alice, KEY_A);
    expectError(await alice.post(`/connection/${a.id}/reconnect`, { scopes: ['x'] }), 400, 'validation_failed');
  });
});

describe('transfer', () => {
  it('keeps the credentials when the owner hands it over', async () => {
    const a = await connect(alice, KEY_A);
    const res = await alice.transfer(a.id, bobId);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      owner_user_id: bobId,
      status: 'active',
      has_credentials: true,
      transferred_from_user_id: aliceId,
      awaiting_acceptance: true,
    });
    expect(res.body.transferred_at).not.toBeNull();
    // Bob's list now calls upstream with the key Alice gave (until Bob reconnects).
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', a.id).execute();
    const mark = header.peer.seen.length;
    expect((await bob.tools(a.id)).status).toBe(200);
    expect(header.peer.seen.slice(mark).every((s) => s.credential === KEY_A)).toBe(true);
    expectError(await alice.read(a.id), 404, 'not_found');
    const audit = (await t.factories.auditEntries(org.orgId, 'connection.transferred')).find((e) => e.target_id === a.id);
    expect(audit?.changes).toMatchObject({ owner_user_id: { from: aliceId, to: bobId }, credentials: 'kept', awaiting_acceptance: true });
  });

  it('is accepted by its new owner only, once, with an audit entry', async () => {
    const a = await connect(alice, KEY_A);
    expect((await alice.transfer(a.id, bobId)).status).toBe(200);
    // A manager who is not the owner sees it but may not accept for Bob; Alice no longer sees it.
    expectError(await owner.accept(a.id), 403, 'not_connection_owner');
    expectError(await alice.accept(a.id), 404, 'not_found');
    expect((await bob.read(a.id)).body.awaiting_acceptance).toBe(true);
    const res = await bob.accept(a.id);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ owner_user_id: bobId, status: 'active', transferred_from_user_id: aliceId, awaiting_acceptance: false });
    expectError(await bob.accept(a.id), 409, 'invalid_transition');
    const audit = (await t.factories.auditEntries(org.orgId, 'connection.accepted')).find((e) => e.target_id === a.id);
    expect(audit?.changes).toMatchObject({ awaiting_acceptance: { from: true, to: false }, transferred_from_user_id: aliceId });
    // A connection one made oneself has nothing to accept.
    expectError(await alice.accept((await connect(alice, KEY_A)).id), 409, 'invalid_transition');
  });

  it('discards them when a manager transfers someone else’s: disconnected, with an event', async () => {
    const a = await connect(alice, KEY_A);
    const res = await owner.transfer(a.id, bobId);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      owner_user_id: bobId,
      status: 'disconnected',
      status_reason: 'transferred',
      has_credentials: false,
      transferred_from_user_id: aliceId,
      awaiting_acceptance: false,
    });
    const event = (await eventsOf(t, org.orgId, 'connection.disconnected')).find((e) => e.payload.connection.id === a.id);
    expect(event?.payload.connection).toMatchObject({ status: 'disconnected', owner_user_id: bobId });
    expectError(await bob.tools(a.id), 409, 'connection_needs_reauth');
    // A disconnected api_key connection has no key: reconnecting needs one.
    expectError(await bob.reconnect(a.id), 400, 'validation_failed');
    expect((await bob.reconnect(a.id, { api_key: KEY_B })).body).toMatchObject({ status: 'active', has_credentials: true });
  });

  it('refuses non-members, the current owner, and members who may not use it', async () => {
    const a = await connect(alice, KEY_A);
    expectError(await alice.transfer(a.id, await t.factories.user()), 400, 'unknown_reference');
    expectError(await alice.transfer(a.id, aliceId), 409, 'conflict');
    const viewer = await t.factories.member(org.orgId, { roles: [await t.factories.customRole(org.orgId, ['connection:view'])] });
    const res = await alice.transfer(a.id, viewer);
    expectError(res, 400, 'validation_failed');
    expect(res.body.errors[0].pointer).toBe('/user_id');
    expectError(await bob.transfer(a.id, bobId), 404, 'not_found');
  });
});

describe('tools', () => {
  it('lists every upstream page, answered by name a page at a time', async () => {
    const a = await connect(alice, KEY_A);
    const names = await allToolNames(alice, a.id, 10);
    expect(names).toEqual([...names].sort());
    expect(new Set(names).size).toBe(names.length);
    expect(names).toEqual(expect.arrayContaining(['whoami', 'echo', 'tool_001', 'tool_023']));
    expect(names).toHaveLength(25);
    expectError(await alice.tools(a.id, { cursor: 'zz' }), 400, 'invalid_cursor');
  });

  it('walks the tools of an upstream whose names are long, a page at a time', async () => {
    const slug = await customConnector(t, org.orgId, {
      name: `Long names ${Date.now()}`,
      mcp_url: `${new URL(longNames.peer.url).origin}/mcp`,
      auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
    });
    const a = await connect(alice, KEY_A, slug);
    const names = await allToolNames(alice, a.id, 1);
    expect(names).toHaveLength(5);
    expect(names.filter((name) => name.startsWith(LONG))).toHaveLength(3);
    // Out of the way of the plan's limits the later tests reach.
    expect((await alice.remove(a.id)).status).toBe(204);
    expect((await t.call('DELETE', `/connector/${slug}`, undefined, { token: org.token, org: org.orgId })).status).toBe(204);
  });

  it('answers from the cache within its time, and the stale list when the upstream is down', async () => {
    const a = await connect(alice, KEY_A);
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', a.id).execute();
    const first = await alice.tools(a.id, { limit: 5 });
    expect(first.status).toBe(200);
    expect(first.headers.get('tools-stale')).toBe('false');
    const fetchedAt = first.headers.get('tools-fetched-at');
    expect(first.body.data[0]).toEqual({
      name: 'echo',
      title: null,
      description: expect.any(String),
      input_schema: expect.objectContaining({ type: 'object' }),
      output_schema: null,
      annotations: null,
    });
    const mark = header.peer.seen.length;
    const warm = await alice.tools(a.id, { limit: 5 });
    expect(header.peer.seen.length).toBe(mark);
    expect(warm.headers.get('tools-fetched-at')).toBe(fetchedAt);
    // Past its time, with the upstream down: the old list, said to be stale.
    await t.db
      .updateTable('connection_tools')
      .set({ fetched_at: new Date(Date.now() - 3_600_000) })
      .where('connection_id', '=', a.id)
      .execute();
    header.peer.down();
    try {
      const stale = await alice.tools(a.id, { limit: 5 });
      expect(stale.status).toBe(200);
      expect(stale.headers.get('tools-stale')).toBe('true');
      expect(Date.parse(stale.headers.get('tools-fetched-at') ?? '')).toBeLessThan(Date.now() - 3_000_000);
      expect(stale.body.data).toEqual(first.body.data);
      expect((await alice.read(a.id)).body.last_error).toMatch(/Listing tools failed/);
      await t.db.deleteFrom('connection_tools').where('connection_id', '=', a.id).execute();
      expectError(await alice.tools(a.id), 502, 'upstream_unavailable');
    } finally {
      header.peer.up();
    }
    const fresh = await alice.tools(a.id, { limit: 5 });
    expect(fresh.headers.get('tools-stale')).toBe('false');
    expect((await alice.read(a.id)).body.last_error).toBeNull();
  });
});

describe('none connections against the reference server', () => {
  it.each([
    ['Streamable HTTP', 'streamable_http', () => everythingHttp.peer.url],
    ['SSE', 'sse', () => everythingSse.peer.url],
  ] as const)('connects and lists its tools over %s', async (_label, transport, url) => {
    const slug = await customConnector(t, org.orgId, { mcp_url: url(), transport, auth: { type: 'none' } });
    const res = await alice.create({ connector_slug: slug });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ status: 'active', auth_type: 'none', has_credentials: false });
    expectError(await alice.post('/connection', { connector_slug: slug, api_key: 'x' }), 400, 'validation_failed');
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', res.body.id).execute();
    const names = await allToolNames(alice, res.body.id);
    expect(names).toEqual(expect.arrayContaining(['echo', 'get-env']));
    const reconnected = await alice.reconnect(res.body.id);
    expect(reconnected.body.status).toBe('active');
  });
});

describe('when the connector changes', () => {
  async function connectorBy(slug: string, mcpUrl: string, share: { type: 'organization' | 'user'; id: string }) {
    const res = await owner.post('/connector', {
      slug,
      name: `Connector ${slug}`,
      mcp_url: mcpUrl,
      transport: 'streamable_http',
      auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
    });
    expect(res.status).toBe(201);
    const shared = await owner.post(`/connector/${slug}/share`, { principal: share, level: 'use' });
    expect(shared.status).toBe(201);
    return shared.body.id as string;
  }

  it('disconnects its connections when it sends credentials elsewhere', async () => {
    await connectorBy('moving-crm', `${new URL(header.peer.url).origin}/mcp`, { type: 'organization', id: org.orgId });
    const a = await connect(alice, KEY_A, 'moving-crm');
    // A change that keeps the origin keeps the connection.
    expect((await owner.patch('/connector/moving-crm', { name: 'Moving CRM' })).status).toBe(200);
    expect((await alice.read(a.id)).body.status).toBe('active');
    expect((await owner.patch('/connector/moving-crm', { mcp_url: 'https://crm.elsewhere.example/mcp' })).status).toBe(200);
    expect((await alice.read(a.id)).body).toMatchObject({ status: 'disconnected', status_reason: 'connector_changed', has_credentials: false });
    const event = (await eventsOf(t, org.orgId, 'connection.disconnected')).find((e) => e.payload.connection.id === a.id);
    expect(event?.payload).toMatchObject({
      connection: { id: a.id, status: 'disconnected' },
      reason: expect.stringMatching(/changed where credentials are sent/),
    });
    expectError(await alice.tools(a.id), 409, 'connection_needs_reauth');
  });

  it('never sends a connection’s key to another origin than it was obtained for, even before the connection hears of the move', async () => {
    const slug = await customConnector(t, org.orgId, {
      mcp_url: `${new URL(header.peer.url).origin}/mcp`,
      auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
    });
    const a = await connect(alice, KEY_A, slug);
    // The moment between the connector's move and its connections hearing of it (longer on a
    // replica that remembers the connection): the connector names the new origin, the
    // connection still holds the key obtained for the old one.
    const found = await findConnector(t.db, org.orgId, slug);
    await updateConnector(t.db, org.orgId, slug, {
      content: { ...(found!.content as ConnectorContent), mcp_url: `${new URL(longNames.peer.url).origin}/mcp` },
    });
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', a.id).execute();
    const before = longNames.peer.seen.length;
    expectError(await alice.tools(a.id), 409, 'connection_needs_reauth');
    // Reconnecting without a key does not try the stored one there either.
    expectError(await alice.reconnect(a.id), 400, 'validation_failed');
    expect(longNames.peer.seen.slice(before).filter((r) => r.credential !== null)).toEqual([]);
    // With a key given for the new address, it works there.
    expect((await alice.reconnect(a.id, { api_key: KEY_A })).status).toBe(200);
    expect((await alice.tools(a.id)).status).toBe(200);
    // Within the organization's plan limit on custom connectors for the tests after this one.
    expect((await alice.remove(a.id)).status).toBe(204);
    await deleteConnector(t.db, org.orgId, slug);
  });

  it('disconnects a member’s connection when a revoked share leaves them without the connector', async () => {
    const shareId = await connectorBy('private-crm', `${new URL(header.peer.url).origin}/mcp`, { type: 'user', id: aliceId });
    const a = await connect(alice, KEY_A, 'private-crm');
    expect((await owner.delete(`/connector/private-crm/share/${shareId}`)).status).toBe(204);
    expect((await alice.read(a.id)).body).toMatchObject({ status: 'disconnected', status_reason: 'connector_access_lost', has_credentials: false });
    expect((await eventsOf(t, org.orgId, 'connection.disconnected')).some((e) => e.payload.connection.id === a.id)).toBe(true);
  });

  it('disconnects a fork’s connections when a pull moves where credentials go', async () => {
    await connectorBy('upstream-crm', `${new URL(header.peer.url).origin}/mcp`, { type: 'organization', id: org.orgId });
    expect((await owner.post('/connector/upstream-crm/fork', { slug: 'forked-crm' })).status).toBe(201);
    expect((await owner.post('/connector/forked-crm/share', { principal: { type: 'organization', id: org.orgId }, level: 'use' })).status).toBe(201);
    const a = await connect(alice, KEY_A, 'forked-crm');
    const moved = await owner.patch('/connector/upstream-crm', { mcp_url: 'https://crm.moved.example/mcp' });
    expect(moved.status).toBe(200);
    const pulled = await owner.post('/connector/forked-crm/pull', { upstream_version: moved.body.version, fields: ['mcp_url'] });
    expect(pulled.status).toBe(200);
    expect((await alice.read(a.id)).body).toMatchObject({ status: 'disconnected', status_reason: 'connector_changed' });
    expect((await eventsOf(t, org.orgId, 'connection.disconnected')).some((e) => e.payload.connection.id === a.id)).toBe(true);
  });

  it('cannot be deleted while connections use it', async () => {
    await connectorBy('used-crm', `${new URL(header.peer.url).origin}/mcp`, { type: 'organization', id: org.orgId });
    const a = await connect(alice, KEY_A, 'used-crm');
    const refused = await owner.delete('/connector/used-crm');
    expectError(refused, 409, 'connector_in_use');
    expect(refused.body.detail).toMatch(/1 connection/);
    expect((await alice.remove(a.id)).status).toBe(204);
    expect((await owner.delete('/connector/used-crm')).status).toBe(204);
  });
});
