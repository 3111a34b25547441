import { randomBytes } from 'node:crypto';
import type { components } from '../../generated/openapi';
import { startTestApp, type TestApp, type TestResponse } from '../support/app';
import { expectError } from '../support/client';
import { startLogBackend, type LogBackend } from '../support/log-receivers';

/*
 * The six logging destination operations over HTTP, against the real app on a fresh
 * database, with log backends on loopback for `test` (a Splunk HEC, a Datadog intake, an
 * OTLP collector, a plain JSON receiver). Every response is checked against the spec by the
 * test client. What the delivery worker sends is in logging-deliveries.test.ts.
 */

type Schemas = components['schemas'];
type Create = Schemas['LoggingDestinationCreate'];
type Client = ReturnType<TestApp['as']>;

const ID = /^obsd_[0-7][0-9a-hjkmnp-tv-z]{25}$/;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const HEC_TOKEN = '9f3b6c2a-1d4e-4f8a-b7c5-2e0d9a6f1b3c';
const DD_KEY = '0c1f5e7a9b2d4c6e8f0a1b3c5d7e9f21';

let t: TestApp;
let splunk: LogBackend;
let datadog: LogBackend;
let otlp: LogBackend;
let plain: LogBackend;
let elsewhere: LogBackend;
beforeAll(async () => {
  [splunk, datadog, otlp, plain, elsewhere] = await Promise.all([
    startLogBackend('splunk_hec', { secret: HEC_TOKEN }),
    startLogBackend('datadog', { secret: DD_KEY }),
    startLogBackend('otlp_http'),
    startLogBackend('http'),
    startLogBackend('http'),
  ]);
  t = await startTestApp({ env: { DATADOG_LOGS_INTAKE_URL: `${datadog.url}/{site}/api/v2/logs` } });
});
afterAll(async () => {
  await t.close();
  await Promise.all([splunk, datadog, otlp, plain, elsewhere].map((b) => b.close()));
});

const unique = () => randomBytes(5).toString('hex');

async function newOrg(plan = 'enterprise') {
  const seeded = await t.factories.org();
  await t.db.updateTable('organizations').set({ plan }).where('id', '=', seeded.orgId).execute();
  return { ...seeded, client: t.as({ token: seeded.token, org: seeded.orgId }) };
}

const bodies = {
  http: (over: Partial<Extract<Create, { type: 'http' }>> = {}): Create => ({
    name: `SIEM ${unique()}`,
    type: 'http',
    config: { url: `${plain.url}/ingest/mcp`, headers: { Authorization: 'Bearer s3cr3t-header-value' } },
    record_types: ['audit'],
    ...over,
  }),
  datadog: (over: Partial<Extract<Create, { type: 'datadog' }>> = {}): Create => ({
    name: `Datadog ${unique()}`,
    type: 'datadog',
    config: { site: 'datadoghq.eu', api_key: DD_KEY, service: 'acme-mcp' },
    record_types: ['audit', 'tool_call'],
    ...over,
  }),
  splunk: (over: Partial<Extract<Create, { type: 'splunk_hec' }>> = {}): Create => ({
    name: `Splunk ${unique()}`,
    type: 'splunk_hec',
    config: { url: `${splunk.url}/services/collector/event`, hec_token: HEC_TOKEN, index: 'mcp_audit', sourcetype: 'mcp:audit' },
    record_types: ['audit'],
    ...over,
  }),
  otlp: (over: Partial<Extract<Create, { type: 'otlp_http' }>> = {}): Create => ({
    name: `OTel ${unique()}`,
    type: 'otlp_http',
    config: { url: `${otlp.url}/v1/logs`, headers: { 'X-Scope-OrgID': 'acme' }, service: 'acme-mcp' },
    record_types: ['tool_call'],
    ...over,
  }),
};

async function create(client: Client, body: Create) {
  const res = await client.op('createLoggingDestination', { body });
  expect(res.status).toBe(201);
  return res.body;
}

const storedRow = (id: string) => t.db.selectFrom('logging_destinations').selectAll().where('id', '=', id).executeTakeFirst();

async function destinationAudit(orgId: string) {
  return (await t.factories.auditEntries(orgId)).filter((e) => e.action.startsWith('logging_destination.'));
}

function expectNoSecret(res: TestResponse, ...secrets: string[]) {
  for (const secret of secrets) expect(res.text).not.toContain(secret);
}

const NO_DELIVERY = { last_delivery_at: null, last_delivery_error: null, pending_records: 0, next_delivery_attempt_at: null };

// ---------------------------------------------------------------------------------------

describe('createLoggingDestination', () => {
  it('creates a Splunk HEC destination: 201, Location, the token stored sealed and never returned', async () => {
    const { client, orgId, ownerId } = await newOrg();
    const res = await client.op('createLoggingDestination', {
      body: bodies.splunk({ name: 'Splunk audit', config: { ...(bodies.splunk().config as any), request_channel: '0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0' } }),
    });
    expect(res.status).toBe(201);
    expectNoSecret(res, HEC_TOKEN);
    expect(res.body).toEqual({
      id: expect.stringMatching(ID),
      name: 'Splunk audit',
      type: 'splunk_hec',
      config: {
        url: `${splunk.url}/services/collector/event`,
        site: null,
        index: 'mcp_audit',
        source: null,
        sourcetype: 'mcp:audit',
        request_channel: '0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0',
        service: null,
        header_names: [],
        has_api_key: false,
        has_hec_token: true,
        has_header_values: false,
      },
      record_types: ['audit'],
      is_active: true,
      created_at: expect.stringMatching(ISO_MS),
      updated_at: res.body.created_at,
      created_by_user_id: ownerId,
      last_test_at: null,
      last_test_status: null,
      last_test_error: null,
      ...NO_DELIVERY,
    });
    expect(res.headers.get('location')).toBe(`/observability-destination/${res.body.id}`);
    const row = await storedRow(res.body.id);
    expect(row).toMatchObject({ org_id: orgId, secrets_enc: expect.any(String) });
    expect(row!.secrets_enc).not.toContain(HEC_TOKEN);
    expect(JSON.stringify(row!.config)).not.toContain(HEC_TOKEN);
    const [entry] = await destinationAudit(orgId);
    expect(entry).toMatchObject({ action: 'logging_destination.created', target_id: res.body.id });
    expect(JSON.stringify(entry)).not.toContain(HEC_TOKEN);
    const fetched = await client.op('getLoggingDestination', { params: { id: res.body.id } });
    expect(fetched.body).toEqual(res.body);
  });

  it('creates a Datadog destination on each current site, including uk1 and us2.ddog-gov', async () => {
    const { client } = await newOrg();
    for (const site of ['datadoghq.com', 'uk1.datadoghq.com', 'us2.ddog-gov.com'] as const) {
      const created = await create(client, bodies.datadog({ config: { site, api_key: DD_KEY } }));
      expect(created.config).toMatchObject({ url: null, site, has_api_key: true, header_names: [], service: null, source: null });
    }
  });

  it('creates http and OTLP destinations returning header names only, and record types in catalog order', async () => {
    const { client } = await newOrg();
    const res = await client.op('createLoggingDestination', { body: bodies.http({ record_types: ['tool_call', 'audit'] }) });
    expectNoSecret(res, 's3cr3t-header-value');
    expect(res.body.config).toMatchObject({ header_names: ['Authorization'], has_header_values: true, has_api_key: false, has_hec_token: false });
    expect(res.body.record_types).toEqual(['audit', 'tool_call']);
    const otel = await create(client, bodies.otlp());
    expect(otel.config).toMatchObject({ url: `${otlp.url}/v1/logs`, service: 'acme-mcp', header_names: ['X-Scope-OrgID'] });
  });

  it('answers 403 entitlement_exceeded on a plan without audit_log_export, and writes nothing', async () => {
    const { client, orgId } = await newOrg('free');
    expectError(await client.op('createLoggingDestination', { body: bodies.http() }), 403, 'entitlement_exceeded');
    expect(await destinationAudit(orgId)).toEqual([]);
  });

  it('answers 400 validation_failed for a config that does not fit the type', async () => {
    const { client } = await newOrg();
    const res = await client.post('/observability-destination', { ...bodies.datadog(), config: { url: `${plain.url}/x`, hec_token: 'x' } });
    expectError(res, 400, 'validation_failed');
  });

  it('answers 400 validation_failed for a reserved header, and for one given twice in different case', async () => {
    const { client, orgId } = await newOrg();
    const reserved = await client.post(
      '/observability-destination',
      bodies.http({ config: { url: `${plain.url}/x`, headers: { 'Content-Type': 'text/plain' } } }),
    );
    expectError(reserved, 400, 'validation_failed');
    expect(reserved.body.errors).toEqual([{ in: 'body', pointer: '/config/headers/Content-Type', message: expect.stringContaining('set by the server') }]);
    const twice = await client.post('/observability-destination', bodies.http({ config: { url: `${plain.url}/x`, headers: { 'X-Key': 'a', 'x-key': 'b' } } }));
    expectError(twice, 400, 'validation_failed');
    expect(await destinationAudit(orgId)).toEqual([]);
  });

  it('answers 400 validation_failed for a URL with a user name and password', async () => {
    const { client } = await newOrg();
    const res = await client.post('/observability-destination', bodies.http({ config: { url: 'https://user:pass@logs.example.com/x' } }));
    expectError(res, 400, 'validation_failed');
    expect(res.body.errors[0].pointer).toBe('/config/url');
  });

  it('answers 400 outbound_url_not_allowed for plain http to a public host', async () => {
    const { client } = await newOrg();
    expectError(
      await client.post(
        '/observability-destination',
        bodies.splunk({ config: { url: 'http://splunk.example.com:8088/services/collector/event', hec_token: 'x' } }),
      ),
      400,
      'outbound_url_not_allowed',
    );
  });

  it('answers 409 name_taken for a name the organization uses already', async () => {
    const { client } = await newOrg();
    await create(client, bodies.http({ name: 'Taken' }));
    expectError(await client.op('createLoggingDestination', { body: bodies.otlp({ name: 'Taken' }) }), 409, 'name_taken');
  });
});

describe('getLoggingDestination and listLoggingDestinations', () => {
  it('answers 404 for an unknown id and for another organization’s destination', async () => {
    const a = await newOrg();
    const b = await newOrg();
    const theirs = await create(b.client, bodies.http());
    expectError(await a.client.op('getLoggingDestination', { params: { id: theirs.id } }), 404, 'not_found');
    expectError(await a.client.op('getLoggingDestination', { params: { id: 'obsd_01jg3b7f17x9y3z7a1b5c9d3e7' } }), 404, 'not_found');
  });

  it('walks pages of 2 over 5 destinations once each in creation order, and filters by type, record type and state', async () => {
    const { client } = await newOrg();
    const made = [
      await create(client, bodies.http()),
      await create(client, bodies.datadog()),
      await create(client, bodies.splunk({ is_active: false })),
      await create(client, bodies.otlp()),
      await create(client, bodies.http({ record_types: ['tool_call'] })),
    ];
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.op('listLoggingDestinations', { query: { limit: 2, ...(cursor ? { cursor } : {}) } });
      expect(page.status).toBe(200);
      seen.push(...page.body.data.map((d) => d.id));
      cursor = page.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(made.map((d) => d.id));
    const ids = async (query: Record<string, unknown>) => (await client.op('listLoggingDestinations', { query: query as any })).body.data.map((d) => d.id);
    expect(await ids({ type: 'http' })).toEqual([made[0]!.id, made[4]!.id]);
    expect(await ids({ record_type: 'tool_call' })).toEqual([made[1]!.id, made[3]!.id, made[4]!.id]);
    expect(await ids({ is_active: false })).toEqual([made[2]!.id]);
    const listed = await client.op('listLoggingDestinations');
    expectNoSecret(listed, HEC_TOKEN, DD_KEY, 's3cr3t-header-value');
  });
});

describe('updateLoggingDestination', () => {
  it('merges config and headers by name, and audits member names without secret values', async () => {
    const { client, orgId } = await newOrg();
    const created = await create(client, bodies.http());
    const res = await client.op('updateLoggingDestination', {
      params: { id: created.id },
      body: { name: 'Renamed', config: { headers: { 'X-Tenant': 'acme', Authorization: 'Bearer rotated-value' } }, record_types: ['audit', 'tool_call'] },
    });
    expect(res.status).toBe(200);
    expectNoSecret(res, 'rotated-value');
    expect(res.body).toMatchObject({
      name: 'Renamed',
      record_types: ['audit', 'tool_call'],
      config: { url: created.config.url, header_names: ['Authorization', 'X-Tenant'] },
    });
    const removed = await client.op('updateLoggingDestination', { params: { id: created.id }, body: { config: { headers: { Authorization: null } } } });
    expect(removed.body.config).toMatchObject({ header_names: ['X-Tenant'], has_header_values: true });
    const [, updated] = await destinationAudit(orgId);
    expect(updated!.changes).toMatchObject({ name: { from: created.name, to: 'Renamed' }, headers: { changed: true } });
    expect(JSON.stringify(updated)).not.toContain('rotated-value');
  });

  it('answers 400 immutable_field for another type and validation_failed for a member of another type', async () => {
    const { client } = await newOrg();
    const created = await create(client, bodies.datadog());
    expectError(await client.op('updateLoggingDestination', { params: { id: created.id }, body: { type: 'http' } }), 400, 'immutable_field');
    const misplaced = await client.op('updateLoggingDestination', { params: { id: created.id }, body: { config: { url: `${plain.url}/x` } } });
    expectError(misplaced, 400, 'validation_failed');
    expect((misplaced.body as any).errors).toEqual([{ in: 'body', pointer: '/config/url', message: 'does not apply to datadog destinations' }]);
  });

  describe('never sends a stored secret somewhere new', () => {
    it('refuses a Splunk URL on another origin without the HEC token (400 secret_required), and test still goes to the old host', async () => {
      const { client } = await newOrg();
      const created = await create(client, bodies.splunk());
      const moved = await client.op('updateLoggingDestination', {
        params: { id: created.id },
        body: { config: { url: `${elsewhere.url}/services/collector/event` } },
      });
      expectError(moved, 400, 'secret_required');
      expect((moved.body as any).errors).toEqual([{ in: 'body', pointer: '/config/hec_token', message: expect.any(String) }]);
      const before = elsewhere.requests.length;
      await client.op('testLoggingDestination', { params: { id: created.id } });
      expect(elsewhere.requests.length).toBe(before);
      expect((await client.op('getLoggingDestination', { params: { id: created.id } })).body.config.url).toBe(created.config.url);
    });

    it('accepts a new origin with the token sent again, and a new path on the same origin without it', async () => {
      const { client } = await newOrg();
      const created = await create(client, bodies.splunk());
      const samePlace = await client.op('updateLoggingDestination', {
        params: { id: created.id },
        body: { config: { url: `${splunk.url}/services/collector` } },
      });
      expect(samePlace.status).toBe(200);
      const moved = await client.op('updateLoggingDestination', {
        params: { id: created.id },
        body: { config: { url: `${elsewhere.url}/hec`, hec_token: 'a-new-token' } },
      });
      expect(moved.status).toBe(200);
      expect(moved.body.config.url).toBe(`${elsewhere.url}/hec`);
    });

    it('refuses an http URL on another origin unless every stored header is sent again or removed', async () => {
      const { client } = await newOrg();
      const created = await create(
        client,
        bodies.http({ config: { url: `${plain.url}/in`, headers: { Authorization: 'Bearer keep-me-secret', 'X-Tenant': 'acme' } } }),
      );
      const bare = await client.op('updateLoggingDestination', { params: { id: created.id }, body: { config: { url: `${elsewhere.url}/in` } } });
      expectError(bare, 400, 'secret_required');
      expect((bare.body as any).errors.map((e: { pointer: string }) => e.pointer)).toEqual(['/config/headers/Authorization', '/config/headers/X-Tenant']);
      const partly = await client.op('updateLoggingDestination', {
        params: { id: created.id },
        body: { config: { url: `${elsewhere.url}/in`, headers: { 'X-Tenant': 'acme' } } },
      });
      expectError(partly, 400, 'secret_required');
      const ok = await client.op('updateLoggingDestination', {
        params: { id: created.id },
        body: { config: { url: `${elsewhere.url}/in`, headers: { Authorization: null, 'X-Tenant': 'acme' } } },
      });
      expect(ok.status).toBe(200);
      expect(ok.body.config.header_names).toEqual(['X-Tenant']);
    });

    it('refuses a Datadog site change without the API key', async () => {
      const { client } = await newOrg();
      const created = await create(client, bodies.datadog());
      expectError(
        await client.op('updateLoggingDestination', { params: { id: created.id }, body: { config: { site: 'us5.datadoghq.com' } } }),
        400,
        'secret_required',
      );
      const ok = await client.op('updateLoggingDestination', {
        params: { id: created.id },
        body: { config: { site: 'us5.datadoghq.com', api_key: 'ffffffffffffffffffffffffffffffff' } },
      });
      expect(ok.body.config.site).toBe('us5.datadoghq.com');
    });
  });

  it('pauses and resumes; resuming needs the plan feature', async () => {
    const { client, orgId } = await newOrg();
    const created = await create(client, bodies.otlp());
    const paused = await client.op('updateLoggingDestination', { params: { id: created.id }, body: { is_active: false } });
    expect(paused.body.is_active).toBe(false);
    await t.db.updateTable('organizations').set({ plan: 'free' }).where('id', '=', orgId).execute();
    expectError(await client.op('updateLoggingDestination', { params: { id: created.id }, body: { is_active: true } }), 403, 'entitlement_exceeded');
  });
});

describe('deleteLoggingDestination', () => {
  it('answers 204, then 404 for GET and a second DELETE', async () => {
    const { client, orgId } = await newOrg();
    const created = await create(client, bodies.http());
    const res = await client.op('deleteLoggingDestination', { params: { id: created.id } });
    expect(res.status).toBe(204);
    expectError(await client.op('getLoggingDestination', { params: { id: created.id } }), 404, 'not_found');
    expectError(await client.op('deleteLoggingDestination', { params: { id: created.id } }), 404, 'not_found');
    expect((await destinationAudit(orgId)).map((e) => e.action)).toEqual(['logging_destination.created', 'logging_destination.deleted']);
  });
});

describe('testLoggingDestination', () => {
  it('sends a test record to Splunk as an HEC event with the token, and records ok', async () => {
    const { client, orgId } = await newOrg();
    const created = await create(client, bodies.splunk());
    const before = splunk.requests.length;
    const res = await client.op('testLoggingDestination', { params: { id: created.id } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: 'ok',
      error: null,
      destination: { ...created, last_test_at: expect.stringMatching(ISO_MS), last_test_status: 'ok', last_test_error: null },
    });
    const [request, ...more] = splunk.requests.slice(before);
    expect(more).toEqual([]);
    expect(request!.headers.authorization).toBe(`Splunk ${HEC_TOKEN}`);
    expect(request!.records).toEqual([
      {
        time: expect.any(Number),
        host: expect.any(String),
        source: 'mcp-control-plane',
        sourcetype: 'mcp:audit',
        index: 'mcp_audit',
        event: expect.objectContaining({ type: 'test', test: true, organization_id: orgId, destination_id: created.id }),
      },
    ]);
    expect((await destinationAudit(orgId)).map((e) => e.action)).toEqual(['logging_destination.created', 'logging_destination.tested']);
  });

  it('answers 200 with status failed and Splunk’s reason for a wrong token, without the token', async () => {
    const { client } = await newOrg();
    const created = await create(client, bodies.splunk({ config: { url: `${splunk.url}/services/collector/event`, hec_token: 'not-the-token' } }));
    const res = await client.op('testLoggingDestination', { params: { id: created.id } });
    expect(res.body).toMatchObject({ status: 'failed', error: 'Splunk answered 403 Forbidden: Invalid token', destination: { last_test_status: 'failed' } });
    expectNoSecret(res, 'not-the-token');
  });

  it('sends the request channel header a token with indexer acknowledgment needs', async () => {
    const acked = await startLogBackend('splunk_hec', { secret: HEC_TOKEN, ack: true });
    try {
      const { client } = await newOrg();
      const without = await create(client, bodies.splunk({ config: { url: `${acked.url}/services/collector/event`, hec_token: HEC_TOKEN } }));
      expect((await client.op('testLoggingDestination', { params: { id: without.id } })).body).toMatchObject({
        status: 'failed',
        error: 'Splunk answered 400 Bad Request: Data channel is missing',
      });
      const channel = '0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0';
      await client.op('updateLoggingDestination', { params: { id: without.id }, body: { config: { request_channel: channel } } });
      expect((await client.op('testLoggingDestination', { params: { id: without.id } })).body.status).toBe('ok');
      expect(acked.requests.at(-1)!.headers['x-splunk-request-channel']).toBe(channel);
    } finally {
      await acked.close();
    }
  });

  it('sends a gzipped Datadog entry to the site’s intake with the API key', async () => {
    const { client } = await newOrg();
    const created = await create(client, bodies.datadog({ config: { site: 'uk1.datadoghq.com', api_key: DD_KEY, service: 'acme-mcp' } }));
    const before = datadog.requests.length;
    expect((await client.op('testLoggingDestination', { params: { id: created.id } })).body.status).toBe('ok');
    const [request] = datadog.requests.slice(before);
    expect(request!.path).toBe('/uk1.datadoghq.com/api/v2/logs');
    expect(request!.headers['content-encoding']).toBe('gzip');
    expect(request!.records).toEqual([expect.objectContaining({ ddsource: 'mcp-control-plane', service: 'acme-mcp', type: 'test', test: true })]);
  });

  it('sends an OTLP log record with the extra headers, and a plain JSON array to an http endpoint', async () => {
    const { client } = await newOrg();
    const otel = await create(client, bodies.otlp());
    expect((await client.op('testLoggingDestination', { params: { id: otel.id } })).body.status).toBe('ok');
    expect(otlp.requests.at(-1)!.headers['x-scope-orgid']).toBe('acme');
    const hook = await create(client, bodies.http());
    expect((await client.op('testLoggingDestination', { params: { id: hook.id } })).body.status).toBe('ok');
    expect(plain.requests.at(-1)!.headers.authorization).toBe('Bearer s3cr3t-header-value');
    expect(plain.requests.at(-1)!.records).toEqual([expect.objectContaining({ type: 'test', test: true })]);
  });

  it('tests a paused destination too, and answers failed when nothing listens', async () => {
    const { client } = await newOrg();
    const gone = await startLogBackend('http');
    await gone.close();
    const created = await create(client, bodies.http({ config: { url: `${gone.url}/in` }, is_active: false }));
    const res = await client.op('testLoggingDestination', { params: { id: created.id } });
    expect(res.body).toMatchObject({ status: 'failed', error: expect.any(String), destination: { is_active: false } });
  });
});
