import { randomBytes } from 'node:crypto';
import type { components } from '../../generated/openapi';
import { auditDigest } from '../../src/http/context';
import type { HookMap } from '../../src/http/hooks';
import { MODULES } from '../../src/modules';
import { serviceRegistry } from '../../src/modules';
import { clientSecretContext, resolveConnector, seesConnector } from '../../src/areas/connectors/resolve';
import { secretBoxOf } from '../../src/lib/crypto';
import { resealSecrets } from '../../src/operator';
import { startTestApp, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';
import { expectError, type OpRequest } from '../support/client';

/*
 * The Connectors and Custom connectors operations over HTTP, against the real app on a fresh
 * database, with the built-in catalog of test/fixtures/catalog (docs-demo v2: none, two tools;
 * keys-demo v1: api_key; tickets-demo v1: oauth2 by URL alone). Every response is checked
 * against the spec by the test client.
 */

type Schemas = components['schemas'];
type Create = Schemas['ConnectorCreate'];

/** A module listening to the connector hooks as another area would; each test sets what it hears. */
const probe: { changed?: HookMap['connectorChanged']; accessChanged?: HookMap['connectorAccessChanged']; usage?: HookMap['connectorUsage'] } = {};
const probeModule = {
  name: 'Connector hooks probe',
  handlers: {},
  hooks: {
    connectorChanged: (...args: Parameters<HookMap['connectorChanged']>) => probe.changed?.(...args) ?? Promise.resolve(),
    connectorAccessChanged: (...args: Parameters<HookMap['connectorAccessChanged']>) => probe.accessChanged?.(...args) ?? Promise.resolve(),
    connectorUsage: (...args: Parameters<HookMap['connectorUsage']>) => probe.usage?.(...args) ?? Promise.resolve({ count: 0, what: 'probes' }),
  },
};

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ modules: [...MODULES, probeModule] });
});
afterAll(() => t.close());

const unique = () => randomBytes(4).toString('hex');

/** A caller: `op` sends an operation by id, typed; get, post… send requests the spec forbids, untyped. */
type Client = ReturnType<TestApp['as']>;

async function newOrg(): Promise<SeededOrg & { client: Client }> {
  const org = await t.factories.org();
  return { ...org, client: t.as({ token: org.token, org: org.orgId }) };
}

/** A member with the Member role (connector:view, not connector:manage). */
async function plainMember(org: SeededOrg) {
  const userId = await t.factories.member(org.orgId, { roles: ['member'] });
  return { userId, client: t.as({ token: await t.factories.token(org.orgId, userId), org: org.orgId }) };
}

const apiKeyBody = (overrides: Partial<Create> = {}): Create => ({
  slug: `crm-${unique()}`,
  name: 'Acme CRM',
  description: 'Accounts, contacts and deals.',
  icon_url: 'https://cdn.acme.example/icons/crm.png',
  mcp_url: 'https://mcp.acme.example/mcp',
  auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
  tools: [{ name: 'search_contacts', description: 'Finds contacts.', input_schema: { type: 'object', properties: { query: { type: 'string' } } } }],
  documentation: [{ key: 'getting-started', title: 'Getting started', body: 'Paste a key.' }],
  ...overrides,
});

const SECRET = 'very-secret-client-secret-123';
const oauthBody = (overrides: Partial<Create> = {}): Create => ({
  slug: `oauth-${unique()}`,
  name: 'Acme OAuth',
  mcp_url: 'https://mcp.oauth.example/mcp',
  auth: {
    type: 'oauth2',
    authorize_url: 'https://auth.oauth.example/authorize',
    token_url: 'https://auth.oauth.example/token',
    revocation_url: null,
    scopes: ['read'],
    client_id: 'client-1',
    client_secret: SECRET,
  },
  ...overrides,
});

async function created(client: Client, body: Create) {
  const res = await client.op('createConnector', { body });
  expect(res.status).toBe(201);
  return res.body as Schemas['Connector'];
}

const versionsOf = async (orgId: string, slug: string) =>
  await t.db.selectFrom('connector_versions').select(['version', 'content']).where('org_id', '=', orgId).where('slug', '=', slug).orderBy('version').execute();

const eventsOf = async (orgId: string, type: string) =>
  (await t.db.selectFrom('outbox').select(['event_type', 'payload']).where('org_id', '=', orgId).where('event_type', '=', type).orderBy('id').execute()).map(
    (e) => ({ data: e.payload as any }),
  );

// ---------------------------------------------------------------------------------------

describe('listConnectors and getConnector', () => {
  it('lists the built-in catalog and the custom connectors by slug, without tools', async () => {
    const { client } = await newOrg();
    const mine = await created(client, apiKeyBody({ slug: 'aaa-crm' }));
    const res = await client.op('listConnectors');
    expect(res.status).toBe(200);
    expect(res.body.data.map((c: any) => c.slug)).toEqual(['aaa-crm', 'docs-demo', 'keys-demo', 'tickets-demo']);
    expect(res.body.data[0]).toEqual({
      slug: 'aaa-crm',
      name: 'Acme CRM',
      description: 'Accounts, contacts and deals.',
      icon_url: 'https://cdn.acme.example/icons/crm.png',
      source: 'custom',
      transport: 'streamable_http',
      auth_type: 'api_key',
      tool_count: 1,
      version: 1,
      upstream: null,
      created_at: mine.created_at,
      updated_at: mine.updated_at,
    });
    expect(res.body.data[1]).toMatchObject({
      slug: 'docs-demo',
      source: 'built_in',
      auth_type: 'none',
      tool_count: 2,
      version: 2,
      created_at: '2026-11-20T00:00:00.000Z',
    });
    expect(res.body.next_cursor).toBeNull();
  });

  it('filters by source, text and auth type', async () => {
    const { client } = await newOrg();
    await created(client, apiKeyBody({ slug: 'zz-crm', name: 'Deals', description: 'Ticket-free CRM' }));
    const slugs = async (query: OpRequest<'listConnectors'>['query']) => (await client.op('listConnectors', { query })).body.data.map((c: any) => c.slug);
    expect(await slugs({ source: 'custom' })).toEqual(['zz-crm']);
    expect(await slugs({ source: 'built_in' })).toEqual(['docs-demo', 'keys-demo', 'tickets-demo']);
    expect(await slugs({ q: 'TICKET' })).toEqual(['tickets-demo', 'zz-crm']);
    expect(await slugs({ auth_type: 'api_key' })).toEqual(['keys-demo', 'zz-crm']);
    expect(await slugs({ auth_type: 'oauth2', source: 'custom' })).toEqual([]);
  });

  it('walks every page once, built-in and custom interleaved', async () => {
    const { client } = await newOrg();
    for (const slug of ['b-one', 'e-two', 'z-three']) await created(client, apiKeyBody({ slug }));
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await client.op('listConnectors', { query: { limit: 2, ...(cursor ? { cursor } : {}) } });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.data.map((c: any) => c.slug));
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(['b-one', 'docs-demo', 'e-two', 'keys-demo', 'tickets-demo', 'z-three']);
    expectError(await client.get('/connector?cursor=Kg'), 400, 'invalid_cursor');
  });

  it('reads a built-in connector read-only, with its tools and documentation', async () => {
    const { client } = await newOrg();
    const res = await client.op('getConnector', { params: { slug: 'docs-demo' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      slug: 'docs-demo',
      source: 'built_in',
      version: 2,
      auth: { type: 'none' },
      upstream: null,
      created_by_user_id: null,
      updated_at: '2026-11-20T00:00:00.000Z',
      tools: [
        { name: 'search_docs', title: 'Search docs' },
        { name: 'get_page', title: null },
      ],
      documentation: [{ key: 'getting-started', position: 0, updated_at: '2026-11-20T00:00:00.000Z' }],
    });
    const oauth = await client.op('getConnector', { params: { slug: 'tickets-demo' } });
    expect(oauth.body.auth).toEqual({
      type: 'oauth2',
      authorize_url: null,
      token_url: null,
      revocation_url: null,
      scopes: ['read'],
      client_id: null,
      has_client_secret: false,
      pkce: true,
    });
    expectError(await client.op('getConnector', { params: { slug: 'no-such-thing' } }), 404, 'not_found');
  });
});

describe('createConnector', () => {
  it('creates version 1 with the secret sealed, never returned, never audited', async () => {
    const { client, orgId, ownerId } = await newOrg();
    const body = oauthBody();
    const res = await client.op('createConnector', { body });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/connector/${body.slug}`);
    expect(res.text).not.toContain(SECRET);
    expect(res.body).toMatchObject({
      slug: body.slug,
      source: 'custom',
      version: 1,
      upstream: null,
      created_by_user_id: ownerId,
      tools: [],
      documentation: [],
      auth: { type: 'oauth2', client_id: 'client-1', has_client_secret: true, pkce: true, scopes: ['read'] },
    });
    const row = await t.db.selectFrom('connectors').selectAll().where('org_id', '=', orgId).where('slug', '=', body.slug).executeTakeFirstOrThrow();
    expect(row.client_secret_enc).toMatch(/^v2\./);
    expect(JSON.stringify(row.content)).not.toContain(SECRET);
    expect((await versionsOf(orgId, body.slug)).map((v) => v.version)).toEqual([1]);
    const audit = await t.factories.auditEntries(orgId, 'connector.created');
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ target_type: 'connector', target_id: body.slug });
    expect(JSON.stringify(audit[0]!.changes)).not.toContain(SECRET);
    const events = await eventsOf(orgId, 'connector.created');
    expect(events).toEqual([expect.objectContaining({ data: { connector: { slug: body.slug, name: 'Acme OAuth', version: '1' }, forked_from: null } })]);
    expect(JSON.stringify(events)).not.toContain(SECRET);
    const read = await client.op('getConnector', { params: { slug: body.slug } });
    expect(read.body).toEqual(res.body);
    expect(read.text).not.toContain(SECRET);
  });

  it('re-seals the client secret with a new key (cli secrets reseal)', async () => {
    const { client, orgId } = await newOrg();
    const c = await created(client, oauthBody());
    const newKey = randomBytes(32);
    const rotating = secretBoxOf({ current: newKey, older: [t.deps.config.encryptionKeys.current] });
    const columns = serviceRegistry().sealed.filter((col) => col.table === 'connectors');
    expect(columns).toHaveLength(1);
    const report = await resealSecrets(t.db, rotating, columns);
    expect(report.unreadable).toEqual([]);
    expect(report.resealed).toBeGreaterThanOrEqual(1);
    const row = await t.db
      .selectFrom('connectors')
      .select('client_secret_enc')
      .where('org_id', '=', orgId)
      .where('slug', '=', c.slug)
      .executeTakeFirstOrThrow();
    expect(secretBoxOf({ current: newKey, older: [] }).open(row.client_secret_enc!, clientSecretContext(orgId, c.slug))).toBe(SECRET);
    // Back to the app's key, for the tests after this one.
    await resealSecrets(t.db, secretBoxOf({ current: t.deps.config.encryptionKeys.current, older: [newKey] }), columns);
  });

  it('creates an oauth2 connector by URL alone', async () => {
    const { client } = await newOrg();
    const res = await client.op('createConnector', {
      body: { slug: `url-${unique()}`, name: 'By URL', mcp_url: 'https://mcp.byurl.example/mcp', auth: { type: 'oauth2' } },
    });
    expect(res.status).toBe(201);
    expect(res.body.auth).toEqual({
      type: 'oauth2',
      authorize_url: null,
      token_url: null,
      revocation_url: null,
      scopes: [],
      client_id: null,
      has_client_secret: false,
      pkce: true,
    });
    expect(res.body.transport).toBe('streamable_http');
  });

  it('refuses a slug the organization sees already, built-in or custom', async () => {
    const { client } = await newOrg();
    expectError(await client.op('createConnector', { body: apiKeyBody({ slug: 'docs-demo' }) }), 409, 'slug_taken');
    const body = apiKeyBody();
    await created(client, body);
    expectError(await client.op('createConnector', { body }), 409, 'slug_taken');
    // Another organization may use the same slug.
    const other = await newOrg();
    expect((await other.client.op('createConnector', { body })).status).toBe(201);
  });

  it('refuses content the schema alone lets through', async () => {
    const { client, orgId } = await newOrg();
    const tool = { name: 'dup', description: 'x', input_schema: { type: 'object' as const } };
    const cases: [Create, string, string][] = [
      [apiKeyBody({ tools: [tool, tool] }), 'validation_failed', '/tools/1/name'],
      [
        apiKeyBody({
          documentation: [
            { key: 'a', title: 'A', body: '' },
            { key: 'a', title: 'B', body: '' },
          ],
        }),
        'validation_failed',
        '/documentation/1/key',
      ],
      [apiKeyBody({ icon_url: 'http://cdn.acme.example/x.png' }), 'validation_failed', '/icon_url'],
      [apiKeyBody({ auth: { type: 'api_key', placement: 'query', name: 'key', value_prefix: 'Bearer ' } }), 'validation_failed', '/auth/value_prefix'],
      [apiKeyBody({ mcp_url: 'https://user:pw@mcp.acme.example/mcp' }), 'validation_failed', '/mcp_url'],
      [oauthBody({ auth: { type: 'oauth2', client_secret: 'x' } }), 'validation_failed', '/auth/client_secret'],
      [apiKeyBody({ mcp_url: 'https://10.0.0.7/mcp' }), 'outbound_url_not_allowed', '/mcp_url'],
      [apiKeyBody({ mcp_url: 'http://mcp.acme.example/mcp' }), 'outbound_url_not_allowed', '/mcp_url'],
      [oauthBody({ auth: { type: 'oauth2', token_url: 'https://169.254.169.254/token' } }), 'outbound_url_not_allowed', '/auth/token_url'],
      [oauthBody({ auth: { type: 'oauth2', revocation_url: 'https://192.168.1.1/revoke' } }), 'outbound_url_not_allowed', '/auth/revocation_url'],
      [oauthBody({ auth: { type: 'oauth2', authorize_url: 'http://auth.oauth.example/authorize' } }), 'outbound_url_not_allowed', '/auth/authorize_url'],
    ];
    for (const [body, code, pointer] of cases) {
      const res = await client.op('createConnector', { body });
      expectError(res, 400, code);
      expect(res.error?.errors.map((e: any) => e.pointer)).toEqual([pointer]);
    }
    expect(await t.factories.auditEntries(orgId, 'connector.created')).toHaveLength(0);
  });

  it('lets exactly one of several concurrent creates take the last connector the plan allows; the others 403 entitlement_exceeded', async () => {
    const { client, orgId } = await newOrg();
    for (let i = 0; i < 9; i += 1) await created(client, apiKeyBody({ slug: `c-${i}` }));
    const racing = await Promise.all(Array.from({ length: 8 }, (_, i) => client.op('createConnector', { body: apiKeyBody({ slug: `race-${i}` }) })));
    expect(racing.map((r) => r.status).sort()).toEqual([201, 403, 403, 403, 403, 403, 403, 403]);
    for (const res of racing.filter((r) => r.status === 403)) expectError(res, 403, 'entitlement_exceeded');
    const stored = await t.db
      .selectFrom('connectors')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('org_id', '=', orgId)
      .executeTakeFirstOrThrow();
    expect(Number(stored.n)).toBe(10);
  });

  it('refuses the connector past the plan limit with 403 entitlement_exceeded', async () => {
    const { client, orgId } = await newOrg();
    for (let i = 0; i < 10; i += 1) await created(client, apiKeyBody({ slug: `c-${i}` }));
    const res = await client.op('createConnector', { body: apiKeyBody({ slug: 'c-10' }) });
    expectError(res, 403, 'entitlement_exceeded');
    expectError(await client.op('forkConnector', { params: { slug: 'docs-demo' }, body: { slug: 'c-fork' } }), 403, 'entitlement_exceeded');
    await t.db.updateTable('organizations').set({ plan: 'team' }).where('id', '=', orgId).execute();
    expect((await client.op('createConnector', { body: apiKeyBody({ slug: 'c-10' }) })).status).toBe(201);
  });
});

describe('updateConnector', () => {
  it('bumps the version on a change, keeps every version, and not on a change to nothing', async () => {
    const { client, orgId } = await newOrg();
    const c = await created(client, apiKeyBody());
    const res = await client.op('updateConnector', { params: { slug: c.slug }, body: { name: 'Renamed', description: null } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 'Renamed', description: null, version: 2 });
    const same = await client.op('updateConnector', { params: { slug: c.slug }, body: { name: 'Renamed', transport: 'streamable_http' } });
    expect(same.body.version).toBe(2);
    const tools = await client.op('updateConnector', { params: { slug: c.slug }, body: { tools: [] } });
    expect(tools.body).toMatchObject({ version: 3, tools: [] });
    const versions = await versionsOf(orgId, c.slug);
    expect(versions.map((v) => [v.version, (v.content as any).name, (v.content as any).tools.length])).toEqual([
      [1, 'Acme CRM', 1],
      [2, 'Renamed', 1],
      [3, 'Renamed', 0],
    ]);
    const events = await eventsOf(orgId, 'connector.updated');
    expect(events.map((e) => e.data.changed)).toEqual([['name', 'description'], ['tools']]);
    const audit = await t.factories.auditEntries(orgId, 'connector.updated');
    expect(audit.map((a) => a.changes)).toEqual([
      { name: { from: 'Acme CRM', to: 'Renamed' }, description: { from: c.description, to: null }, version: { from: 1, to: 2 } },
      {},
      { tools: { from: auditDigest((versions[1]?.content as any).tools), to: auditDigest([]) }, version: { from: 2, to: 3 } },
    ]);
  });

  it('records an update in the audit log as {from, to} per changed member, the client secret only as changed', async () => {
    const { client, orgId } = await newOrg();
    const c = await created(client, oauthBody());
    const auth = { type: 'oauth2' as const, authorize_url: 'https://auth.oauth.example/authorize', token_url: 'https://auth.oauth.example/token' };
    const res = await client.op('updateConnector', {
      params: { slug: c.slug },
      body: { transport: 'sse', auth: { ...auth, client_id: 'client-2', client_secret: 'new-secret-456' } },
    });
    expect(res.status).toBe(200);
    const [entry] = (await t.factories.auditEntries(orgId, 'connector.updated')).map((a) => a.changes);
    expect(entry).toEqual({
      transport: { from: 'streamable_http', to: 'sse' },
      auth: { from: expect.objectContaining({ client_id: 'client-1', scopes: ['read'] }), to: expect.objectContaining({ client_id: 'client-2', scopes: [] }) },
      client_secret: { changed: true },
      version: { from: 1, to: 2 },
    });
    expect(JSON.stringify(entry)).not.toContain('new-secret-456');
  });

  it('keeps the client secret only for the same OAuth client at the same provider', async () => {
    const { client, orgId } = await newOrg();
    const c = await created(client, oauthBody());
    const auth = {
      type: 'oauth2' as const,
      authorize_url: 'https://auth.oauth.example/authorize',
      token_url: 'https://auth.oauth.example/token',
      client_id: 'client-1',
    };
    let res = await client.op('updateConnector', { params: { slug: c.slug }, body: { auth: { ...auth, scopes: ['read', 'write'] } } });
    expect(res.body.auth).toMatchObject({ has_client_secret: true, scopes: ['read', 'write'] });
    const resolved = await resolveConnector(t.db, t.deps.secrets, orgId, c.created_by_user_id!, true, c.slug);
    expect(resolved?.auth).toMatchObject({ type: 'oauth2', client_secret: SECRET });
    res = await client.op('updateConnector', { params: { slug: c.slug }, body: { auth: { ...auth, client_id: 'client-2' } } });
    expect(res.body.auth).toMatchObject({ client_id: 'client-2', has_client_secret: false });
    res = await client.op('updateConnector', { params: { slug: c.slug }, body: { auth: { ...auth, client_id: 'client-2', client_secret: 'new-secret-456' } } });
    expect(res.body.auth).toMatchObject({ has_client_secret: true });
    expect(res.text).not.toContain('new-secret-456');
    res = await client.op('updateConnector', { params: { slug: c.slug }, body: { auth: { type: 'none' } } });
    expect(res.body.auth).toEqual({ type: 'none' });
    const row = await t.db
      .selectFrom('connectors')
      .select('client_secret_enc')
      .where('org_id', '=', orgId)
      .where('slug', '=', c.slug)
      .executeTakeFirstOrThrow();
    expect(row.client_secret_enc).toBeNull();
    const audit = await t.factories.auditEntries(orgId);
    expect(JSON.stringify(audit)).not.toContain('new-secret-456');

    // A discovered provider follows the MCP server: a new origin drops the secret, a new path keeps it.
    const byUrl = await created(client, oauthBody({ auth: { type: 'oauth2', client_id: 'registered-1', client_secret: SECRET } }));
    res = await client.op('updateConnector', { params: { slug: byUrl.slug }, body: { mcp_url: 'https://mcp.oauth.example/v2/mcp' } });
    expect(res.body.auth).toMatchObject({ has_client_secret: true });
    res = await client.op('updateConnector', { params: { slug: byUrl.slug }, body: { mcp_url: 'https://mcp.elsewhere.example/mcp' } });
    expect(res.body.auth).toMatchObject({ client_id: 'registered-1', has_client_secret: false });
  });

  it('tells the connections to start over when the upstream changes identity, not otherwise', async () => {
    const { client, orgId } = await newOrg();
    const c = await created(client, oauthBody());
    const calls: string[] = [];
    const hook = async (_w: unknown, org: string, slug: string) => void calls.push(`${org}:${slug}`);
    probe.changed = hook;
    try {
      await client.op('updateConnector', {
        params: { slug: c.slug },
        body: {
          mcp_url: 'https://mcp.oauth.example/v2/mcp',
          transport: 'sse',
          auth: {
            type: 'oauth2',
            token_url: 'https://auth.oauth.example/token',
            authorize_url: 'https://auth.oauth.example/authorize2',
            client_id: 'client-1',
            scopes: ['x'],
          },
        },
      });
      expect(calls).toEqual([]);
      await client.op('updateConnector', { params: { slug: c.slug }, body: { mcp_url: 'https://other.oauth.example/mcp' } });
      expect(calls).toEqual([`${orgId}:${c.slug}`]);
      await client.op('updateConnector', {
        params: { slug: c.slug },
        body: { auth: { type: 'oauth2', token_url: 'https://auth.oauth.example/token2', client_id: 'client-1' } },
      });
      await client.op('updateConnector', { params: { slug: c.slug }, body: { auth: { type: 'none' } } });
      expect(calls).toHaveLength(3);
    } finally {
      delete probe.changed;
    }
  });

  it('refuses to change a built-in connector, and 404s what is not there', async () => {
    const { client } = await newOrg();
    expectError(await client.op('updateConnector', { params: { slug: 'docs-demo' }, body: { name: 'Mine' } }), 409, 'built_in_connector_read_only');
    expectError(await client.op('updateConnector', { params: { slug: 'nothing-here' }, body: { name: 'Mine' } }), 404, 'not_found');
    expectError(await client.op('deleteConnector', { params: { slug: 'docs-demo' } }), 409, 'built_in_connector_read_only');
    expectError(await client.op('upsertConnectorDocumentation', { params: { slug: 'docs-demo' }, body: { entries: [] } }), 409, 'built_in_connector_read_only');
    expectError(
      await client.op('shareConnector', {
        params: { slug: 'docs-demo' },
        body: { principal: { type: 'user', id: 'usr_01jg3b7f0m5x2c8v4n6b9t1r3e' }, level: 'use' },
      }),
      409,
      'built_in_connector_read_only',
    );
    expectError(
      await client.op('linkConnectorUpstream', { params: { slug: 'docs-demo' }, body: { upstream_slug: 'keys-demo' } }),
      409,
      'built_in_connector_read_only',
    );
  });
});

describe('deleteConnector', () => {
  it('deletes the connector, its versions and shares; forks lose their upstream', async () => {
    const { client, orgId } = await newOrg();
    const c = await created(client, apiKeyBody());
    await client.op('shareConnector', { params: { slug: c.slug }, body: { principal: { type: 'organization', id: orgId }, level: 'use' } });
    const fork = await client.op('forkConnector', { params: { slug: c.slug }, body: { slug: `${c.slug}-fork` } });
    expect(fork.body.upstream).toMatchObject({ slug: c.slug, current_version: 1 });
    const res = await client.op('deleteConnector', { params: { slug: c.slug } });
    expect(res.status).toBe(204);
    expectError(await client.op('getConnector', { params: { slug: c.slug } }), 404, 'not_found');
    expectError(await client.op('deleteConnector', { params: { slug: c.slug } }), 404, 'not_found');
    expect(await versionsOf(orgId, c.slug)).toEqual([]);
    expect(await t.db.selectFrom('shares').select('id').where('org_id', '=', orgId).where('resource_id', '=', c.slug).execute()).toEqual([]);
    const after = await client.op('getConnector', { params: { slug: `${c.slug}-fork` } });
    expect(after.body.upstream).toMatchObject({ slug: c.slug, version: 1, current_version: null, updates_available: false });
    expectError(await client.op('previewConnectorPull', { params: { slug: `${c.slug}-fork` } }), 409, 'upstream_connector_missing');
    expect(await eventsOf(orgId, 'connector.deleted')).toEqual([
      expect.objectContaining({ data: { connector: { slug: c.slug, name: 'Acme CRM', version: '1' } } }),
    ]);
  });

  it('refuses while something still uses the connector', async () => {
    const { client } = await newOrg();
    const c = await created(client, apiKeyBody());
    const hook = async (_db: unknown, _org: string, slug: string) => ({ count: slug === c.slug ? 2 : 0, what: 'connections' });
    probe.usage = hook;
    try {
      const res = await client.op('deleteConnector', { params: { slug: c.slug } });
      expectError(res, 409, 'connector_in_use');
      expect(res.error?.detail).toContain('2 connections');
    } finally {
      delete probe.usage;
    }
    expect((await client.op('getConnector', { params: { slug: c.slug } })).status).toBe(200);
  });
});

describe('visibility', () => {
  it('shows custom connectors to members through a user, team or organization share, and to managers always', async () => {
    const org = await newOrg();
    const member = await plainMember(org);
    const c = await created(org.client, apiKeyBody());
    const listed = async () => (await member.client.op('listConnectors', { query: { source: 'custom' } })).body.data.map((x: any) => x.slug);
    expect(await listed()).toEqual([]);
    expectError(await member.client.op('getConnector', { params: { slug: c.slug } }), 404, 'not_found');
    expectError(await member.client.op('listConnectorShares', { params: { slug: c.slug } }), 404, 'not_found');
    expect((await member.client.op('getConnector', { params: { slug: 'docs-demo' } })).status).toBe(200);
    expect(await resolveConnector(t.db, t.deps.secrets, org.orgId, member.userId, false, c.slug)).toBeNull();

    const direct = await org.client.op('shareConnector', { params: { slug: c.slug }, body: { principal: { type: 'user', id: member.userId }, level: 'use' } });
    expect(direct.status).toBe(201);
    expect(await listed()).toEqual([c.slug]);
    expect((await member.client.op('getConnector', { params: { slug: c.slug } })).status).toBe(200);
    expect(await resolveConnector(t.db, t.deps.secrets, org.orgId, member.userId, false, c.slug)).toMatchObject({ slug: c.slug, source: 'custom', version: 1 });
    expect(await seesConnector(t.db, org.orgId, member.userId, c.slug)).toBe(true);

    const calls: string[] = [];
    const hook = async (_w: unknown, _org: string, slug: string) => void calls.push(slug);
    probe.accessChanged = hook;
    try {
      expect((await org.client.op('revokeConnectorShare', { params: { slug: c.slug, aclId: direct.body.id } })).status).toBe(204);
    } finally {
      delete probe.accessChanged;
    }
    expect(calls).toEqual([c.slug]);
    expect(await listed()).toEqual([]);
    expect(await seesConnector(t.db, org.orgId, member.userId, c.slug)).toBe(false);
    expect(await seesConnector(t.db, org.orgId, org.ownerId, c.slug)).toBe(true);

    const teamId = await t.factories.team(org.orgId, 'Platform', [member.userId]);
    const team = await org.client.op('shareConnector', { params: { slug: c.slug }, body: { principal: { type: 'team', id: teamId }, level: 'use' } });
    expect(await listed()).toEqual([c.slug]);
    await org.client.op('revokeConnectorShare', { params: { slug: c.slug, aclId: team.body.id } });
    expect(await listed()).toEqual([]);

    await org.client.op('shareConnector', { params: { slug: c.slug }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
    expect(await listed()).toEqual([c.slug]);
    expect((await member.client.op('listConnectorShares', { params: { slug: c.slug } })).body.data).toHaveLength(1);
    // A share never lets a member without connector:manage change the connector.
    expectError(await member.client.op('updateConnector', { params: { slug: c.slug }, body: { name: 'x' } }), 403, 'missing_permission');
  });

  it('answers 404 for another organization’s connector, and leaves it alone', async () => {
    const a = await newOrg();
    const b = await newOrg();
    const c = await created(b.client, apiKeyBody());
    expectError(await a.client.op('getConnector', { params: { slug: c.slug } }), 404, 'not_found');
    expectError(await a.client.op('updateConnector', { params: { slug: c.slug }, body: { name: 'Stolen' } }), 404, 'not_found');
    expectError(await a.client.op('forkConnector', { params: { slug: c.slug }, body: { slug: `${c.slug}-x` } }), 404, 'not_found');
    expectError(await a.client.op('deleteConnector', { params: { slug: c.slug } }), 404, 'not_found');
    expect((await a.client.op('listConnectors', { query: { source: 'custom' } })).body.data).toEqual([]);
    expect((await b.client.op('getConnector', { params: { slug: c.slug } })).body).toEqual(c);
  });
});

describe('forkConnector', () => {
  it('forks a built-in connector with its base version', async () => {
    const { client, orgId } = await newOrg();
    const res = await client.op('forkConnector', { params: { slug: 'docs-demo' }, body: { slug: 'docs-mine', name: 'Our docs' } });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe('/connector/docs-mine');
    expect(res.body).toMatchObject({
      slug: 'docs-mine',
      name: 'Our docs',
      source: 'custom',
      version: 1,
      description: 'Searches the demo documentation.',
      upstream: { slug: 'docs-demo', version: 2, current_version: 2, updates_available: false },
    });
    expect(res.body.tools).toHaveLength(2);
    expect(await eventsOf(orgId, 'connector.created')).toEqual([
      expect.objectContaining({ data: { connector: { slug: 'docs-mine', name: 'Our docs', version: '1' }, forked_from: 'docs-demo' } }),
    ]);
    expect(await t.factories.auditEntries(orgId, 'connector.forked')).toHaveLength(1);
    expect((await client.op('previewConnectorPull', { params: { slug: 'docs-mine' } })).body).toEqual({
      slug: 'docs-mine',
      upstream_slug: 'docs-demo',
      base_version: 2,
      upstream_version: 2,
      changes: [],
    });
    expectError(await client.op('forkConnector', { params: { slug: 'docs-demo' }, body: { slug: 'keys-demo' } }), 409, 'slug_taken');
    expectError(await client.op('forkConnector', { params: { slug: 'docs-demo' }, body: { slug: 'docs-mine' } }), 409, 'slug_taken');
    expectError(await client.op('forkConnector', { params: { slug: 'nope-nope' }, body: { slug: 'docs-other' } }), 404, 'not_found');
  });

  it('forks a custom connector with its secret, without showing it', async () => {
    const { client, orgId, ownerId } = await newOrg();
    const c = await created(client, oauthBody());
    const res = await client.op('forkConnector', { params: { slug: c.slug }, body: { slug: `${c.slug}-copy` } });
    expect(res.status).toBe(201);
    expect(res.text).not.toContain(SECRET);
    expect(res.body).toMatchObject({ name: 'Acme OAuth', auth: { has_client_secret: true }, upstream: { slug: c.slug, version: 1 } });
    const resolved = await resolveConnector(t.db, t.deps.secrets, orgId, ownerId, true, `${c.slug}-copy`);
    expect(resolved?.auth).toMatchObject({ client_secret: SECRET });
  });
});

describe('previewConnectorPull and applyConnectorPull', () => {
  it('shows upstream changes field by field with conflicts, applies the chosen ones, and moves the base', async () => {
    const { client, orgId } = await newOrg();
    const up = await created(client, apiKeyBody({ slug: 'up-crm' }));
    await client.op('forkConnector', { params: { slug: up.slug }, body: { slug: 'down-crm' } });
    const newTool = { name: 'create_deal', title: 'Create deal', description: 'Opens a deal.', input_schema: { type: 'object' as const } };
    await client.op('updateConnector', { params: { slug: up.slug }, body: { description: 'Upstream description', tools: [...up.tools, newTool] } });
    await client.op('updateConnector', { params: { slug: 'down-crm' }, body: { description: 'Local description', name: 'Local name' } });
    await client.op('updateConnector', { params: { slug: up.slug }, body: { name: 'Local name' } });

    const preview = await client.op('previewConnectorPull', { params: { slug: 'down-crm' } });
    expect(preview.status).toBe(200);
    expect(preview.body).toEqual({
      slug: 'down-crm',
      upstream_slug: 'up-crm',
      base_version: 1,
      upstream_version: 3,
      changes: [
        {
          field: 'description',
          kind: 'modified',
          upstream_value: 'Upstream description',
          local_value: 'Local description',
          base_value: 'Accounts, contacts and deals.',
          conflict: true,
        },
        { field: 'tools/create_deal', kind: 'added', upstream_value: { ...newTool }, local_value: null, base_value: null, conflict: false },
      ],
    });
    const summary = (await client.op('getConnector', { params: { slug: 'down-crm' } })).body.upstream;
    expect(summary).toMatchObject({ version: 1, current_version: 3, updates_available: true });

    expectError(
      await client.op('applyConnectorPull', { params: { slug: 'down-crm' }, body: { upstream_version: 3, fields: ['name'] } }),
      400,
      'validation_failed',
    );
    expectError(await client.op('applyConnectorPull', { params: { slug: 'down-crm' }, body: { upstream_version: 2, fields: [] } }), 409, 'upstream_changed');

    const applied = await client.op('applyConnectorPull', { params: { slug: 'down-crm' }, body: { upstream_version: 3, fields: ['tools/create_deal'] } });
    expect(applied.status).toBe(200);
    expect(applied.body).toMatchObject({
      description: 'Local description',
      version: 3,
      upstream: { slug: 'up-crm', version: 3, current_version: 3, updates_available: false },
    });
    expect(applied.body.tools.map((x: any) => x.name)).toEqual(['search_contacts', 'create_deal']);
    expect((await client.op('previewConnectorPull', { params: { slug: 'down-crm' } })).body.changes).toEqual([]);
    expect((await t.factories.auditEntries(orgId, 'connector.pulled'))[0]?.changes).toMatchObject({ fields: ['tools/create_deal'], upstream_version: 3 });

    // Upstream moves on: the next preview shows only that, and a stale pull is refused.
    await client.op('updateConnector', { params: { slug: up.slug }, body: { tools: [newTool] } });
    const next = await client.op('previewConnectorPull', { params: { slug: 'down-crm' } });
    expect(next.body).toMatchObject({ base_version: 3, upstream_version: 4, changes: [{ field: 'tools/search_contacts', kind: 'removed', conflict: false }] });
    expectError(
      await client.op('applyConnectorPull', { params: { slug: 'down-crm' }, body: { upstream_version: 3, fields: ['tools/search_contacts'] } }),
      409,
      'upstream_changed',
    );
    // Declining everything moves the base without a new version.
    const declined = await client.op('applyConnectorPull', { params: { slug: 'down-crm' }, body: { upstream_version: 4, fields: [] } });
    expect(declined.body).toMatchObject({ version: 3, upstream: { version: 4, updates_available: false } });
  });

  it('refuses a pull that would leave more documentation entries than a connector holds, changing nothing', async () => {
    const { client } = await newOrg();
    const entries = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => ({ key: `${prefix}-${i}`, title: `Entry ${i}`, body: 'Text.' }));
    const up = await created(client, apiKeyBody({ slug: 'up-docs', documentation: entries('u', 150) }));
    await client.op('forkConnector', { params: { slug: up.slug }, body: { slug: 'down-docs' } });
    // Each side reaches the cap of 200 on its own.
    expect((await client.op('upsertConnectorDocumentation', { params: { slug: 'down-docs' }, body: { entries: entries('local', 50) } })).status).toBe(200);
    expect((await client.op('upsertConnectorDocumentation', { params: { slug: up.slug }, body: { entries: entries('upstream', 50) } })).status).toBe(200);
    const preview = await client.op('previewConnectorPull', { params: { slug: 'down-docs' } });
    const fields = preview.body.changes.map((change: { field: string }) => change.field);
    const refused = await client.op('applyConnectorPull', { params: { slug: 'down-docs' }, body: { upstream_version: preview.body.upstream_version, fields } });
    expectError(refused, 400, 'validation_failed');
    expect(refused.error?.errors[0]).toMatchObject({ pointer: '/fields', message: expect.stringContaining('at most 200') });
    const after = (await client.op('getConnector', { params: { slug: 'down-docs' } })).body;
    expect(after.documentation).toHaveLength(200);
    expect(after.version).toBe((await client.op('getConnector', { params: { slug: 'down-docs' } })).body.version);
    // Declining them is fine.
    expect(
      (await client.op('applyConnectorPull', { params: { slug: 'down-docs' }, body: { upstream_version: preview.body.upstream_version, fields: [] } })).status,
    ).toBe(200);
  });

  it('previews a pull only for someone who may see the upstream connector too', async () => {
    const org = await newOrg();
    const suffix = unique();
    const up = await created(org.client, apiKeyBody({ slug: `hidden-${suffix}` }));
    const fork = `shown-${suffix}`;
    expect((await org.client.op('forkConnector', { params: { slug: up.slug }, body: { slug: fork } })).status).toBe(201);
    await org.client.op('updateConnector', { params: { slug: up.slug }, body: { description: 'Upstream moved on.' } });
    const member = await plainMember(org);
    await org.client.op('shareConnector', { params: { slug: fork }, body: { principal: { type: 'user', id: member.userId }, level: 'use' } });
    expect((await member.client.op('getConnector', { params: { slug: fork } })).status).toBe(200);
    const preview = await member.client.op('previewConnectorPull', { params: { slug: fork } });
    expectError(preview, 409, 'upstream_connector_missing');
    expect(preview.text).not.toContain('Upstream moved on.');
    // Shared with them too, the preview shows.
    await org.client.op('shareConnector', { params: { slug: up.slug }, body: { principal: { type: 'user', id: member.userId }, level: 'use' } });
    expect((await member.client.op('previewConnectorPull', { params: { slug: fork } })).status).toBe(200);
  });

  it('refuses connectors without lineage', async () => {
    const { client } = await newOrg();
    const c = await created(client, apiKeyBody());
    expectError(await client.op('previewConnectorPull', { params: { slug: c.slug } }), 409, 'connector_not_forked');
    expectError(await client.op('applyConnectorPull', { params: { slug: c.slug }, body: { upstream_version: 1, fields: [] } }), 409, 'connector_not_forked');
    expectError(await client.op('previewConnectorPull', { params: { slug: 'docs-demo' } }), 409, 'connector_not_forked');
    expectError(await client.op('previewConnectorPull', { params: { slug: 'not-there' } }), 404, 'not_found');
  });
});

describe('linkConnectorUpstream', () => {
  it('attaches lineage to a hand-made connector, replacing any before, without changing its content', async () => {
    const { client } = await newOrg();
    const c = await created(client, apiKeyBody({ slug: 'keys-mine', name: 'Keys Demo', mcp_url: 'https://mcp.keys.example/mcp' }));
    const res = await client.op('linkConnectorUpstream', { params: { slug: c.slug }, body: { upstream_slug: 'keys-demo' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ version: 1, upstream: { slug: 'keys-demo', version: 1, current_version: 1, updates_available: false } });
    // Based on upstream's current version: nothing upstream changed since.
    expect((await client.op('previewConnectorPull', { params: { slug: c.slug } })).body).toMatchObject({
      upstream_slug: 'keys-demo',
      base_version: 1,
      upstream_version: 1,
      changes: [],
    });
    const other = await created(client, apiKeyBody());
    await client.op('updateConnector', { params: { slug: other.slug }, body: { name: 'Other, renamed', tools: [] } });
    const relinked = await client.op('linkConnectorUpstream', { params: { slug: c.slug }, body: { upstream_slug: other.slug, upstream_version: 1 } });
    expect(relinked.body).toMatchObject({ version: 1, upstream: { slug: other.slug, version: 1, current_version: 2, updates_available: true } });
    const preview = await client.op('previewConnectorPull', { params: { slug: c.slug } });
    expect(preview.body.changes.map((x: any) => [x.field, x.kind, x.conflict])).toEqual([
      ['name', 'modified', true],
      ['tools/search_contacts', 'removed', false],
    ]);
    expect((await client.op('previewConnectorPull', { params: { slug: c.slug } })).body.upstream_slug).toBe(other.slug);
  });

  it('refuses itself, a cycle, an unknown upstream and a version the upstream never had', async () => {
    const { client } = await newOrg();
    const a = await created(client, apiKeyBody());
    await client.op('forkConnector', { params: { slug: a.slug }, body: { slug: `${a.slug}-b` } });
    expectError(await client.op('linkConnectorUpstream', { params: { slug: a.slug }, body: { upstream_slug: a.slug } }), 400, 'validation_failed');
    expectError(await client.op('linkConnectorUpstream', { params: { slug: a.slug }, body: { upstream_slug: `${a.slug}-b` } }), 400, 'validation_failed');
    const unknown = await client.op('linkConnectorUpstream', { params: { slug: a.slug }, body: { upstream_slug: 'nobody-here' } });
    expectError(unknown, 400, 'unknown_reference');
    expect(unknown.error?.errors).toEqual([{ in: 'body', pointer: '/upstream_slug', message: expect.any(String) }]);
    expectError(
      await client.op('linkConnectorUpstream', { params: { slug: a.slug }, body: { upstream_slug: 'docs-demo', upstream_version: 1 } }),
      400,
      'validation_failed',
    );
    expectError(
      await client.op('linkConnectorUpstream', { params: { slug: a.slug }, body: { upstream_slug: 'docs-demo', upstream_version: 7 } }),
      400,
      'validation_failed',
    );
  });
});

describe('upsertConnectorDocumentation', () => {
  it('creates and replaces by key, keeps or deletes the rest, and bumps the version once', async () => {
    const { client, orgId } = await newOrg();
    const c = await created(client, apiKeyBody());
    const res = await client.op('upsertConnectorDocumentation', {
      params: { slug: c.slug },
      body: {
        entries: [
          { key: 'getting-started', title: 'Getting started', body: 'New body', position: 1 },
          { key: 'limits', title: 'Limits', body: '100/min' },
        ],
      },
    });
    expect(res.status).toBe(200);
    expect(res.body.version).toBe(2);
    expect(res.body.documentation.map((d: any) => [d.key, d.position, d.body])).toEqual([
      ['limits', 0, '100/min'],
      ['getting-started', 1, 'New body'],
    ]);
    const again = await client.op('upsertConnectorDocumentation', {
      params: { slug: c.slug },
      body: { entries: [{ key: 'limits', title: 'Limits', body: '100/min' }] },
    });
    expect(again.body.version).toBe(2);
    const only = await client.op('upsertConnectorDocumentation', {
      params: { slug: c.slug },
      body: { entries: [{ key: 'limits', title: 'Limits', body: '100/min' }], delete_missing: true },
    });
    expect(only.body).toMatchObject({ version: 3, documentation: [{ key: 'limits' }] });
    const audit = await t.factories.auditEntries(orgId, 'connector.documentation_updated');
    expect(audit.map((a) => a.changes)).toEqual([
      { created: ['limits'], replaced: ['getting-started'], deleted: [], version: 2 },
      { created: [], replaced: [], deleted: [], version: 2 },
      { created: [], replaced: [], deleted: ['getting-started'], version: 3 },
    ]);
    expect((await eventsOf(orgId, 'connector.updated')).map((e) => e.data.changed)).toEqual([['documentation'], ['documentation']]);
    const dup = await client.op('upsertConnectorDocumentation', {
      params: { slug: c.slug },
      body: {
        entries: [
          { key: 'x', title: 'X', body: '' },
          { key: 'x', title: 'Y', body: '' },
        ],
      },
    });
    expectError(dup, 400, 'validation_failed');
    expect(dup.error?.errors[0]?.pointer).toBe('/entries/1/key');
    expectError(await client.op('upsertConnectorDocumentation', { params: { slug: 'not-there' }, body: { entries: [] } }), 404, 'not_found');
  });
});

describe('connector shares', () => {
  it('shares, shares again (200 with the level changed), lists, and revokes', async () => {
    const org = await newOrg();
    const c = await created(org.client, apiKeyBody());
    const member = await plainMember(org);
    const first = await org.client.op('shareConnector', { params: { slug: c.slug }, body: { principal: { type: 'user', id: member.userId }, level: 'use' } });
    expect(first.status).toBe(201);
    expect(first.headers.get('location')).toBe(`/connector/${c.slug}/share/${first.body.id}`);
    expect(first.body).toMatchObject({
      resource_type: 'connector',
      resource_id: c.slug,
      principal: { type: 'user', id: member.userId },
      level: 'use',
      created_by_user_id: org.ownerId,
    });
    const again = await org.client.op('shareConnector', { params: { slug: c.slug }, body: { principal: { type: 'user', id: member.userId }, level: 'edit' } });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: first.body.id, level: 'edit' });
    await org.client.op('shareConnector', { params: { slug: c.slug }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
    const page1 = await org.client.op('listConnectorShares', { params: { slug: c.slug }, query: { limit: 1 } });
    const page2 = await org.client.op('listConnectorShares', { params: { slug: c.slug }, query: { limit: 1, cursor: page1.body.next_cursor ?? undefined } });
    expect([...page1.body.data, ...page2.body.data].map((s: any) => s.principal.type)).toEqual(['user', 'organization']);
    expect(page2.body.next_cursor).toBeNull();
    expect((await org.client.op('listConnectorShares', { params: { slug: 'docs-demo' } })).body).toEqual({ data: [], next_cursor: null });
    expect((await t.factories.auditEntries(org.orgId, 'connector.shared')).length).toBe(3);

    expect((await org.client.op('revokeConnectorShare', { params: { slug: c.slug, aclId: first.body.id } })).status).toBe(204);
    expectError(await org.client.op('revokeConnectorShare', { params: { slug: c.slug, aclId: first.body.id } }), 404, 'not_found');
    expect(await t.factories.auditEntries(org.orgId, 'connector.share_revoked')).toHaveLength(1);
  });

  it('refuses principals that are not an active member, a team of the organization, or the organization', async () => {
    const org = await newOrg();
    const other = await newOrg();
    const c = await created(org.client, apiKeyBody());
    const outsider = await t.factories.user();
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    const foreignTeam = await t.factories.team(other.orgId, 'Elsewhere');
    for (const principal of [
      { type: 'user' as const, id: outsider },
      { type: 'user' as const, id: suspended },
      { type: 'team' as const, id: foreignTeam },
      { type: 'organization' as const, id: other.orgId },
    ]) {
      const res = await org.client.op('shareConnector', { params: { slug: c.slug }, body: { principal, level: 'use' } });
      expectError(res, 400, 'unknown_reference');
      expect(res.error?.errors).toEqual([{ in: 'body', pointer: '/principal/id', message: expect.any(String) }]);
    }
    expect((await org.client.op('listConnectorShares', { params: { slug: c.slug } })).body.data).toEqual([]);
  });
});
