import { randomBytes } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import type { components } from '../../generated/openapi';
import { newId } from '../../src/lib/ids';
import { classifyAddress } from '../../src/outbound/client';
import { startTestApp, type TestApp, type TestResponse } from '../support/app';
import { startHttpReceiver, startSmtpServer, usePeers } from '../support/peers';
import { expectError } from '../support/client';

/*
 * The six notification destination operations over HTTP, against the real app on a fresh
 * database, with a real SMTP server and a real HTTP receiver (standing in for Slack) on
 * loopback. Every response is checked against the spec by the test client.
 */

const LIST = '/notification-destination';
const itemPath = (id: string) => `${LIST}/${id}`;
const testPath = (id: string) => `${LIST}/${id}/test`;

const DESTINATION_ID = /^onfd_[0-7][0-9a-hjkmnp-tv-z]{25}$/;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const AUDIT_PREFIX = 'notification_destination.';

type Schemas = components['schemas'];
type EmailCreate = Schemas['EmailDestinationCreate'];
type SlackCreate = Schemas['SlackDestinationCreate'];

/**
 * A caller: `op` sends the six operations by id, typed (a wrong operation or body does not
 * compile); get, post… send requests the spec forbids (bad input), untyped. Both act as one caller.
 */
type Client = ReturnType<TestApp['as']>;

const peers = usePeers();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
});
afterAll(() => t.close());

// ---------------------------------------------------------------------------------------
// Helpers: valid bodies, a fresh organization, and what the database and peers saw.
// ---------------------------------------------------------------------------------------

const unique = () => randomBytes(6).toString('hex');

/** A Slack incoming-webhook URL on the local receiver; the last segment is the secret. */
const hookUrl = (base = peers.receiver.url) => `${base}/services/T${unique()}/B${unique()}/${unique()}${unique()}`;

/** A valid email destination body. */
const emailBody = (overrides: Partial<EmailCreate> = {}): EmailCreate => ({
  name: 'Ops alerts',
  type: 'email',
  config: { to: ['ops@acme.example'] },
  event_types: ['member.joined'],
  ...overrides,
});

/** Bodies the spec refuses: any member may be wrong. Sent with the untyped client. */
type Body = Record<string, unknown>;
const rawEmail = (overrides: Body = {}): Body => ({ ...emailBody(), ...overrides });
const rawSlack = (webhookUrl: string, overrides: Body = {}): Body => ({ ...slackBody(webhookUrl), ...overrides });

/** A valid Slack destination body. */
const slackBody = (webhookUrl: string, overrides: Partial<SlackCreate> = {}): SlackCreate => ({
  name: '#mcp-admin',
  type: 'slack',
  config: { webhook_url: webhookUrl },
  event_types: ['role.created'],
  ...overrides,
});

/** A fresh organization, its owner's all-permission token, and a client acting with it. */
async function newOrg(app: TestApp = t, input: { name?: string } = {}) {
  const org = await app.factories.org(input);
  return { ...org, client: app.as({ token: org.token, org: org.orgId }) };
}

async function create(client: Client, body: Schemas['NotificationDestinationCreate']) {
  const res = await client.op('createNotificationDestination', { body });
  expect(res.status).toBe(201);
  return res.body;
}

/** A validation problem (in the body unless `where` says otherwise); the message is checked only where given. */
const problem = (pointer: string, message?: string, where = 'body') => ({ in: where, pointer, message: message ?? expect.any(String) });
const byPointer = (problems: { pointer: string; message?: unknown }[]) =>
  [...problems].sort((a, b) => (a.pointer === b.pointer ? String(a.message).localeCompare(String(b.message)) : a.pointer.localeCompare(b.pointer)));

function expectValidation(res: TestResponse, problems: ReturnType<typeof problem>[]) {
  expectError(res, 400, 'validation_failed');
  expect(byPointer(res.body.errors)).toEqual(byPointer(problems));
}

/** The secret (and its distinctive last segment) appears nowhere in the response. */
function expectNoSecret(res: TestResponse, url: string) {
  const secret = url.slice(url.lastIndexOf('/') + 1);
  expect(res.text).not.toContain(url);
  expect(res.text).not.toContain(secret);
}

function storedRow(id: string, app: TestApp = t) {
  return app.db.selectFrom('notification_destinations').selectAll().where('id', '=', id).executeTakeFirst();
}

function countRows(orgId: string, app: TestApp = t) {
  return app.db
    .selectFrom('notification_destinations')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('org_id', '=', orgId)
    .executeTakeFirstOrThrow()
    .then((r) => Number(r.n));
}

async function destinationAudit(orgId: string, app: TestApp = t) {
  return (await app.factories.auditEntries(orgId)).filter((e) => e.action.startsWith(AUDIT_PREFIX));
}

/** Requests the receiver got for one webhook URL. */
const deliveredTo = (url: string) => peers.receiver.requests.filter((r) => r.path === new URL(url).pathname);

/** Messages the SMTP peer accepted for one recipient. */
const mailFor = (address: string) => peers.smtp.messages.filter((m) => m.to.includes(address));

/** The header block of a raw message, with folded lines unfolded. */
const headersOf = (raw: string) => raw.slice(0, raw.indexOf('\r\n\r\n')).replace(/\r\n[ \t]+/g, ' ');

const mailbox = (label: string) => `${label}-${unique()}@acme.example`;

// ---------------------------------------------------------------------------------------

describe('createNotificationDestination', () => {
  it('creates an email destination and answers 201 with the destination and its Location', async () => {
    const { client, orgId, ownerId } = await newOrg();
    const res = await client.op('createNotificationDestination', {
      body: emailBody({
        config: { to: ['ops@acme.example'], cc: ['lead@acme.example'], bcc: ['audit@acme.example'], subject_prefix: '[Acme MCP]' },
        event_types: ['member.joined', 'connection.needs_reauth'],
      }),
    });

    expect(res.status).toBe(201);
    const row = await storedRow(res.body.id);
    expect(row).toBeDefined();
    expect(res.body).toEqual({
      id: expect.stringMatching(DESTINATION_ID),
      name: 'Ops alerts',
      type: 'email',
      config: { to: ['ops@acme.example'], cc: ['lead@acme.example'], bcc: ['audit@acme.example'], subject_prefix: '[Acme MCP]', has_webhook_url: false },
      event_types: ['connection.needs_reauth', 'member.joined'],
      is_active: true,
      created_at: row!.created_at.toISOString(),
      updated_at: row!.created_at.toISOString(),
      created_by_user_id: ownerId,
      last_test_at: null,
      last_test_status: null,
      last_test_error: null,
    });
    expect(res.body.created_at).toMatch(ISO_MS);
    expect(res.headers.get('location')).toBe(`/notification-destination/${res.body.id}`);
    expect(row).toMatchObject({ org_id: orgId, webhook_url_enc: null, is_active: true });

    const fetched = await client.get(res.headers.get('location')!);
    expect(fetched.status).toBe(200);
    expect(fetched.body).toEqual(res.body);
  });

  it('fills in empty cc and bcc and a null subject prefix for a minimal email destination', async () => {
    const { client } = await newOrg();
    const created = await create(client, emailBody());
    expect(created.config).toEqual({ to: ['ops@acme.example'], cc: [], bcc: [], subject_prefix: null, has_webhook_url: false });
    expect(created.event_types).toEqual(['member.joined']);
  });

  it('creates a Slack destination without ever returning the webhook URL, and stores it encrypted', async () => {
    const { client, ownerId } = await newOrg();
    const url = hookUrl();
    const res = await client.op('createNotificationDestination', {
      body: slackBody(url, { config: { webhook_url: url, subject_prefix: '[Acme MCP]' }, event_types: ['role.deleted', 'role.created'] }),
    });

    expect(res.status).toBe(201);
    expectNoSecret(res, url);
    expect(res.body).toEqual({
      id: expect.stringMatching(DESTINATION_ID),
      name: '#mcp-admin',
      type: 'slack',
      config: { to: [], cc: [], bcc: [], subject_prefix: '[Acme MCP]', has_webhook_url: true },
      event_types: ['role.created', 'role.deleted'],
      is_active: true,
      created_at: expect.stringMatching(ISO_MS),
      updated_at: res.body.created_at,
      created_by_user_id: ownerId,
      last_test_at: null,
      last_test_status: null,
      last_test_error: null,
    });

    const row = await storedRow(res.body.id);
    expect(row!.webhook_url_enc).toEqual(expect.any(String));
    expect(row!.webhook_url_enc).not.toContain(url);
    expect(row!.webhook_url_enc).not.toContain(new URL(url).pathname);
    expect(JSON.stringify(row!.config)).not.toContain(url);

    for (const read of [await client.op('getNotificationDestination', { params: { id: res.body.id } }), await client.op('listNotificationDestinations')]) {
      expect(read.status).toBe(200);
      expectNoSecret(read, url);
    }
  });

  it('creates a paused destination when is_active is false', async () => {
    const { client } = await newOrg();
    const created = await create(client, emailBody({ is_active: false }));
    expect(created.is_active).toBe(false);
    expect((await storedRow(created.id))!.is_active).toBe(false);
  });

  it('returns event_types in catalog order whatever order they were sent in', async () => {
    const { client } = await newOrg();
    const created = await create(client, emailBody({ event_types: ['mcp_server.token_rotated', 'member.joined', 'connection.created', 'role.updated'] }));
    expect(created.event_types).toEqual(['connection.created', 'mcp_server.token_rotated', 'member.joined', 'role.updated']);
  });

  it('accepts a Slack webhook on a public https host without calling it', async () => {
    const { client } = await newOrg();
    const url = `https://hooks.slack.com/services/T000/B000/${unique()}`;
    const res = await client.op('createNotificationDestination', { body: slackBody(url) });
    expect(res.status).toBe(201);
    expectNoSecret(res, url);
    expect(res.body.config.has_webhook_url).toBe(true);
  });

  it('works with a session of an owner, recording the person as creator', async () => {
    const { orgId, ownerId } = await newOrg();
    const session = await t.factories.session(ownerId);
    const res = await t.as({ session, org: orgId }).post(LIST, emailBody());
    expect(res.status).toBe(201);
    expect(res.body.created_by_user_id).toBe(ownerId);
    const [entry] = await destinationAudit(orgId);
    expect(entry).toMatchObject({ action: 'notification_destination.created', actor_type: 'user', actor_id: ownerId, actor_user_id: ownerId });
  });

  it('answers 409 name_taken for a name already used in the organization, and writes nothing', async () => {
    const { client, orgId } = await newOrg();
    await create(client, emailBody({ name: 'Ops alerts' }));
    const url = hookUrl();
    const res = await client.op('createNotificationDestination', { body: slackBody(url, { name: 'Ops alerts' }) });
    expectError(res, 409, 'name_taken');
    expect(res.error?.detail).toContain('Ops alerts');
    expectNoSecret(res, url);
    expect(await countRows(orgId)).toBe(1);
    expect(await destinationAudit(orgId)).toHaveLength(1);
  });

  it('allows the same name in another organization', async () => {
    const first = await newOrg();
    const second = await newOrg();
    await create(first.client, emailBody({ name: 'Shared name' }));
    await create(second.client, emailBody({ name: 'Shared name' }));
  });

  describe('refusing webhook URLs the server must not call', () => {
    const refused = [
      ['plain http to a public host', 'http://hooks.slack.com/services/T000/B000/XXXX'],
      ['plain http to a public address', 'http://8.8.8.8/services/T000/B000/XXXX'],
      ['a scheme other than http(s)', 'ftp://hooks.slack.com/services/T000/B000/XXXX'],
      ['a user name and password in the URL', 'https://user:pass@hooks.slack.com/services/T000/B000/XXXX'],
      ['a private address', 'https://10.1.2.3/services/T000/B000/XXXX'],
      ['a private address (192.168/16)', 'https://192.168.1.20/services/T000/B000/PRIVATE192'],
      ['the link-local metadata address', 'https://169.254.169.254/latest/meta-data/iam-credentials'],
      ['an IPv6 unique-local address', 'https://[fd00::1]/services/T000/B000/UNIQUELOCAL6'],
    ] as const;

    it.each(refused)('answers 400 outbound_url_not_allowed for %s, and writes nothing', async (_what, url) => {
      const { client, orgId } = await newOrg();
      const res = await client.op('createNotificationDestination', { body: slackBody(url) });
      expectError(res, 400, 'outbound_url_not_allowed');
      expect(res.error?.errors).toEqual([problem('/config/webhook_url')]);
      expectNoSecret(res, url);
      expect(await countRows(orgId)).toBe(0);
      expect(await destinationAudit(orgId)).toEqual([]);
    });
  });

  describe('validation', () => {
    let org: Awaited<ReturnType<typeof newOrg>>;
    beforeAll(async () => {
      org = await newOrg();
    });

    const url = 'https://hooks.slack.com/services/T000/B000/XXXXXXXX';
    const withoutMember = (body: Body, member: string) => Object.fromEntries(Object.entries(body).filter(([key]) => key !== member));
    const cases: [string, unknown, ReturnType<typeof problem>[]][] = [
      ['a missing name', withoutMember(rawEmail(), 'name'), [problem('/name', 'is required')]],
      ['a missing type', withoutMember(rawEmail(), 'type'), [problem('/type', 'is required')]],
      ['a missing config', withoutMember(rawEmail(), 'config'), [problem('/config', 'is required')]],
      ['missing event_types', withoutMember(rawEmail(), 'event_types'), [problem('/event_types', 'is required')]],
      ['a Slack config without webhook_url', rawSlack(url, { config: { subject_prefix: '[x]' } }), [problem('/config/webhook_url', 'is required')]],
      ['a name that is a number', rawEmail({ name: 42 }), [problem('/name', 'must be string')]],
      ['is_active as a string', rawEmail({ is_active: 'true' }), [problem('/is_active', 'must be boolean')]],
      ['event_types as a string', rawEmail({ event_types: 'member.joined' }), [problem('/event_types', 'must be array')]],
      ['a config that is a string', rawEmail({ config: 'ops@acme.example' }), [problem('/config', 'must be object')]],
      ['a recipient that is a number', rawEmail({ config: { to: [42] } }), [problem('/config/to/0', 'must be string')]],
      ['an unknown top-level member', rawEmail({ colour: 'red' }), [problem('/colour', 'is not a known member')]],
      [
        'an unknown member inside config',
        rawEmail({ config: { to: ['ops@acme.example'], channel: '#ops' } }),
        [problem('/config/channel', 'is not a known member')],
      ],
      [
        'has_webhook_url sent by the client',
        rawEmail({ config: { to: ['ops@acme.example'], has_webhook_url: false } }),
        [problem('/config/has_webhook_url', 'is not a known member')],
      ],
      [
        'a Slack config with `to` and no webhook_url',
        rawSlack(url, { config: { to: ['ops@acme.example'] } }),
        [problem('/config/webhook_url', 'is required'), problem('/config/to', 'is not a known member')],
      ],
      [
        'a Slack config with `to` next to webhook_url',
        rawSlack(url, { config: { webhook_url: url, to: ['ops@acme.example'] } }),
        [problem('/config/to', 'is not a known member')],
      ],
      ['an email config without `to`', rawEmail({ config: { cc: ['ops@acme.example'] } }), [problem('/config/to', 'is required')]],
      [
        'an email config with a webhook_url',
        rawEmail({ config: { to: ['ops@acme.example'], webhook_url: url } }),
        [problem('/config/webhook_url', 'is not a known member')],
      ],
      ['an empty `to`', rawEmail({ config: { to: [] } }), [problem('/config/to')]],
      ['an unknown type', rawEmail({ type: 'webhook' }), [problem('/type')]],
      [
        'an unknown event type',
        rawEmail({ event_types: ['member.exploded'] }),
        [problem('/event_types/0', expect.stringMatching(/^must be one of "access_request.created", /))],
      ],
      ['an unknown event type after a good one', rawEmail({ event_types: ['member.joined', 'member.left'] }), [problem('/event_types/1')]],
      ['empty event_types', rawEmail({ event_types: [] }), [problem('/event_types')]],
      ['a repeated event type', rawEmail({ event_types: ['member.joined', 'member.joined'] }), [problem('/event_types')]],
      ['a malformed address in to', rawEmail({ config: { to: ['not-an-address'] } }), [problem('/config/to/0', 'must match format "email"')]],
      ['a malformed address in cc', rawEmail({ config: { to: ['ops@acme.example'], cc: ['ops at acme'] } }), [problem('/config/cc/0')]],
      [
        'a malformed address in bcc',
        rawEmail({ config: { to: ['ops@acme.example'], bcc: ['audit@acme.example', '@acme.example'] } }),
        [problem('/config/bcc/1')],
      ],
      ['a repeated recipient', rawEmail({ config: { to: ['ops@acme.example', 'ops@acme.example'] } }), [problem('/config/to')]],
      ['an empty name', rawEmail({ name: '' }), [problem('/name'), problem('/name')]],
      ['a blank name', rawEmail({ name: '   ' }), [problem('/name')]],
      ['a name longer than 100 characters', rawEmail({ name: 'n'.repeat(101) }), [problem('/name')]],
      [
        'a subject prefix longer than 100 characters',
        rawEmail({ config: { to: ['ops@acme.example'], subject_prefix: 'p'.repeat(101) } }),
        [problem('/config/subject_prefix')],
      ],
      ['a webhook_url that is not a URL', rawSlack('not a url'), [problem('/config/webhook_url')]],
      ['a webhook_url longer than 2048 characters', rawSlack(`https://hooks.slack.com/services/${'x'.repeat(2048)}`), [problem('/config/webhook_url')]],
      [
        'several problems at once',
        { ...rawEmail({ name: 42, event_types: [], colour: 'red' }), config: { to: ['bad'] } },
        [problem('/name'), problem('/event_types'), problem('/colour'), problem('/config/to/0')],
      ],
    ];

    it.each(cases)('answers 400 validation_failed for %s, pointing at the member', async (_what, body, problems) => {
      const res = await org.client.post(LIST, body);
      expectValidation(res, problems);
    });

    it('writes nothing for any of them', async () => {
      expect((await org.client.op('listNotificationDestinations')).body).toEqual({ data: [], next_cursor: null });
      expect(await countRows(org.orgId)).toBe(0);
      expect(await destinationAudit(org.orgId)).toEqual([]);
    });
  });

  it('answers 400 validation_failed for a JSON body that is not an object', async () => {
    const { client, orgId } = await newOrg();
    const json = { 'content-type': 'application/json' };
    const array = await client.post(LIST, undefined, { raw: JSON.stringify([emailBody()]), headers: json });
    expectError(array, 400, 'validation_failed');
    expect(array.body.errors).toEqual([problem('')]);
    // A scalar is either refused by the parser or by validation; never a 500.
    for (const raw of ['5', 'true', 'null', '"Ops"']) {
      const res = await client.post(LIST, undefined, { raw, headers: json });
      expect(res.status).toBe(400);
      expect(['validation_failed', 'malformed_json']).toContain(res.body.code);
    }
    expect(await countRows(orgId)).toBe(0);
  });
});

describe('getNotificationDestination', () => {
  it('returns the destination as it was created', async () => {
    const { client } = await newOrg();
    const created = await create(client, emailBody({ config: { to: ['a@acme.example', 'b@acme.example'], subject_prefix: '[A]' } }));
    const res = await client.op('getNotificationDestination', { params: { id: created.id } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual(created);
  });

  it('answers 404 not_found for an id of the right shape that does not exist', async () => {
    const { client } = await newOrg();
    const id = newId('notificationDestination');
    const res = await client.op('getNotificationDestination', { params: { id } });
    expectError(res, 404, 'not_found');
    expect(res.error?.detail).toContain(id);
  });

  it('answers 400 validation_failed pointing at the path for an id that is not onfd_…', async () => {
    const { client } = await newOrg();
    for (const id of ['onfd_123', newId('user'), 'ops-alerts']) {
      expectValidation(await client.op('getNotificationDestination', { params: { id } }), [problem('/id', undefined, 'path')]);
    }
  });
});

describe('updateNotificationDestination', () => {
  const fullEmail = () =>
    emailBody({
      config: { to: ['ops@acme.example'], cc: ['lead@acme.example'], bcc: ['audit@acme.example'], subject_prefix: '[Acme MCP]' },
      event_types: ['member.joined', 'invite.sent'],
    });

  it('renames and keeps every other member', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { name: 'On-call' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ...created, name: 'On-call', updated_at: expect.stringMatching(ISO_MS) });
    expect((await client.op('getNotificationDestination', { params: { id: created.id } })).body).toEqual(res.body);
  });

  it('merges config: changing cc keeps to, bcc and the subject prefix', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const res = await client.op('updateNotificationDestination', {
      params: { id: created.id },
      body: { config: { cc: ['cto@acme.example', 'cfo@acme.example'] } },
    });
    expect(res.status).toBe(200);
    expect(res.body.config).toEqual({ ...created.config, cc: ['cto@acme.example', 'cfo@acme.example'] });
    expect(res.body.event_types).toEqual(created.event_types);
    expect((await storedRow(created.id))!.config).toEqual({
      to: ['ops@acme.example'],
      cc: ['cto@acme.example', 'cfo@acme.example'],
      bcc: ['audit@acme.example'],
      subject_prefix: '[Acme MCP]',
    });
  });

  it('clears the subject prefix with null and keeps the recipients', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { subject_prefix: null } } });
    expect(res.status).toBe(200);
    expect(res.body.config).toEqual({ ...created.config, subject_prefix: null });
  });

  it('replaces recipients and empties cc with an empty list', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { to: ['oncall@acme.example'], cc: [] } } });
    expect(res.status).toBe(200);
    expect(res.body.config).toEqual({ ...created.config, to: ['oncall@acme.example'], cc: [] });
  });

  it('replaces event_types, answering them in catalog order', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const res = await client.op('updateNotificationDestination', {
      params: { id: created.id },
      body: { event_types: ['connection.disconnected', 'connection.needs_reauth'] },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ...created, event_types: ['connection.disconnected', 'connection.needs_reauth'], updated_at: expect.any(String) });
  });

  it('pauses with is_active false and resumes with true, keeping the config', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const paused = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { is_active: false } });
    expect(paused.status).toBe(200);
    expect(paused.body).toEqual({ ...created, is_active: false, updated_at: expect.any(String) });
    expect((await client.op('listNotificationDestinations', { query: { is_active: false } })).body.data.map((d: { id: string }) => d.id)).toEqual([created.id]);
    const resumed = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { is_active: true } });
    expect(resumed.body).toEqual({ ...created, updated_at: expect.any(String) });
  });

  it('accepts type with the value it already has', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { type: 'email', name: 'Still email' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ...created, name: 'Still email', updated_at: expect.any(String) });
    const alone = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { type: 'email' } });
    expect(alone.status).toBe(200);
    expect(alone.body.type).toBe('email');
  });

  it('answers 400 immutable_field for another type, and changes nothing', async () => {
    const { client, orgId } = await newOrg();
    const created = await create(client, fullEmail());
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { type: 'slack', name: 'Now Slack' } });
    expectError(res, 400, 'immutable_field');
    expect(res.error?.errors).toEqual([problem('/type')]);
    expect((await client.op('getNotificationDestination', { params: { id: created.id } })).body).toEqual(created);
    expect(await destinationAudit(orgId)).toHaveLength(1);
  });

  it('answers 400 validation_failed for email members on a Slack destination, and changes nothing', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url));
    const before = await storedRow(created.id);
    expectValidation(await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { to: ['ops@acme.example'] } } }), [
      problem('/config/to'),
    ]);
    expectValidation(
      await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { cc: ['a@acme.example'], bcc: ['b@acme.example'] } } }),
      [problem('/config/cc'), problem('/config/bcc')],
    );
    expect((await client.op('getNotificationDestination', { params: { id: created.id } })).body).toEqual(created);
    expect(await storedRow(created.id)).toEqual(before);
  });

  it('answers 400 validation_failed for webhook_url on an email destination, and changes nothing', async () => {
    const { client } = await newOrg();
    const created = await create(client, fullEmail());
    const url = hookUrl();
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { webhook_url: url, cc: [] } } });
    expectValidation(res, [problem('/config/webhook_url')]);
    expectNoSecret(res, url);
    expect((await client.op('getNotificationDestination', { params: { id: created.id } })).body).toEqual(created);
    expect((await storedRow(created.id))!.webhook_url_enc).toBeNull();
  });

  it('changes the webhook URL without returning it, and the next test goes to the new URL', async () => {
    const { client, orgId } = await newOrg();
    const oldUrl = hookUrl();
    const newUrl = hookUrl();
    const created = await create(client, slackBody(oldUrl));
    const before = await storedRow(created.id);

    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { webhook_url: newUrl } } });
    expect(res.status).toBe(200);
    expectNoSecret(res, newUrl);
    expectNoSecret(res, oldUrl);
    expect(res.body).toEqual({ ...created, updated_at: expect.any(String) });
    const after = await storedRow(created.id);
    expect(after!.webhook_url_enc).not.toBe(before!.webhook_url_enc);
    expect(after!.webhook_url_enc).not.toContain(newUrl);

    expect((await client.op('testNotificationDestination', { params: { id: created.id } })).body.status).toBe('ok');
    expect(deliveredTo(newUrl)).toHaveLength(1);
    expect(deliveredTo(oldUrl)).toHaveLength(0);

    const [, updated] = await destinationAudit(orgId);
    expect(updated!.action).toBe('notification_destination.updated');
    expect(JSON.stringify(updated!.changes)).not.toContain(new URL(newUrl).pathname);
  });

  it('keeps a Slack destination’s subject prefix and webhook when only the prefix changes', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url));
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { subject_prefix: '[Slack]' } } });
    expect(res.status).toBe(200);
    expect(res.body.config).toEqual({ to: [], cc: [], bcc: [], subject_prefix: '[Slack]', has_webhook_url: true });
    await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(deliveredTo(url)).toHaveLength(1);
  });

  it('answers 400 outbound_url_not_allowed for a plain-http public webhook URL, and keeps the old one', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url));
    const before = await storedRow(created.id);
    const refused = 'http://hooks.slack.com/services/T000/B000/YYYYYYYY';
    const res = await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { webhook_url: refused } } });
    expectError(res, 400, 'outbound_url_not_allowed');
    expect(res.error?.errors).toEqual([problem('/config/webhook_url')]);
    expectNoSecret(res, refused);
    expect(await storedRow(created.id)).toEqual(before);
  });

  it('answers 409 name_taken when renaming to a name another destination has, and accepts its own name', async () => {
    const { client, orgId } = await newOrg();
    await create(client, emailBody({ name: 'First' }));
    const second = await create(client, emailBody({ name: 'Second' }));
    const res = await client.op('updateNotificationDestination', { params: { id: second.id }, body: { name: 'First', is_active: false } });
    expectError(res, 409, 'name_taken');
    expect((await client.op('getNotificationDestination', { params: { id: second.id } })).body).toEqual(second);
    expect(await destinationAudit(orgId)).toHaveLength(2);

    const same = await client.op('updateNotificationDestination', { params: { id: second.id }, body: { name: 'Second' } });
    expect(same.status).toBe(200);
    expect(same.body.name).toBe('Second');
  });

  it('answers 404 not_found for an unknown id', async () => {
    const { client, orgId } = await newOrg();
    expectError(await client.op('updateNotificationDestination', { params: { id: newId('notificationDestination') }, body: { name: 'x' } }), 404, 'not_found');
    expect(await destinationAudit(orgId)).toEqual([]);
  });

  describe('validation', () => {
    let org: Awaited<ReturnType<typeof newOrg>>;
    let created: Body & { id: string };
    beforeAll(async () => {
      org = await newOrg();
      created = await create(org.client, emailBody());
    });

    const cases: [string, unknown, ReturnType<typeof problem>[]][] = [
      ['an empty body', {}, [problem('')]],
      ['an empty config', { config: {} }, [problem('/config')]],
      ['an unknown top-level member', { colour: 'red' }, [problem('/colour', 'is not a known member')]],
      ['an unknown member inside config', { config: { channel: '#ops' } }, [problem('/config/channel', 'is not a known member')]],
      ['created_at, which is read-only', { created_at: '2026-01-01T00:00:00.000Z' }, [problem('/created_at', 'is not a known member')]],
      ['a name that is a number', { name: 42 }, [problem('/name', 'must be string')]],
      ['a blank name', { name: ' ' }, [problem('/name')]],
      ['is_active as a string', { is_active: 'no' }, [problem('/is_active', 'must be boolean')]],
      ['an unknown type', { type: 'webhook' }, [problem('/type')]],
      ['an empty `to`', { config: { to: [] } }, [problem('/config/to')]],
      ['a malformed address', { config: { cc: ['nobody'] } }, [problem('/config/cc/0')]],
      ['empty event_types', { event_types: [] }, [problem('/event_types')]],
      ['an unknown event type', { event_types: ['member.joined', 'nope'] }, [problem('/event_types/1')]],
      ['a body that is an array', [{ name: 'x' }], [problem('')]],
    ];

    it.each(cases)('answers 400 validation_failed for %s', async (_what, body, problems) => {
      expectValidation(await org.client.patch(itemPath(created.id), body), problems);
    });

    it('changes nothing for any of them', async () => {
      expect((await org.client.op('getNotificationDestination', { params: { id: created.id } })).body).toEqual(created);
      expect(await destinationAudit(org.orgId)).toHaveLength(1);
    });
  });
});

describe('deleteNotificationDestination', () => {
  it('answers 204 without a body; the destination is then gone for GET, DELETE and the list', async () => {
    const { client } = await newOrg();
    const kept = await create(client, emailBody({ name: 'Kept' }));
    const url = hookUrl();
    const created = await create(client, slackBody(url));

    const res = await client.op('deleteNotificationDestination', { params: { id: created.id } });
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect(await storedRow(created.id)).toBeUndefined();

    expectError(await client.op('getNotificationDestination', { params: { id: created.id } }), 404, 'not_found');
    expectError(await client.op('deleteNotificationDestination', { params: { id: created.id } }), 404, 'not_found');
    expectError(await client.op('updateNotificationDestination', { params: { id: created.id }, body: { name: 'x' } }), 404, 'not_found');
    expectError(await client.op('testNotificationDestination', { params: { id: created.id } }), 404, 'not_found');
    expect(deliveredTo(url)).toHaveLength(0);
    expect((await client.op('listNotificationDestinations')).body).toEqual({ data: [kept], next_cursor: null });
  });

  it('frees the name for a new destination', async () => {
    const { client } = await newOrg();
    const created = await create(client, emailBody({ name: 'Reused' }));
    await client.op('deleteNotificationDestination', { params: { id: created.id } });
    const again = await create(client, emailBody({ name: 'Reused' }));
    expect(again.id).not.toBe(created.id);
  });

  it('answers 404 not_found for an unknown id and 400 for a malformed one', async () => {
    const { client } = await newOrg();
    expectError(await client.op('deleteNotificationDestination', { params: { id: newId('notificationDestination') } }), 404, 'not_found');
    expectValidation(await client.op('deleteNotificationDestination', { params: { id: 'onfd_nope' } }), [problem('/id', undefined, 'path')]);
  });
});

describe('testNotificationDestination', () => {
  it('posts { text } to the Slack webhook, answers ok and records the test', async () => {
    const { client } = await newOrg(t, { name: 'Acme Robotics' });
    const url = hookUrl();
    const created = await create(client, slackBody(url, { name: '#ops-alerts', event_types: ['role.created', 'member.joined'] }));

    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.status).toBe(200);
    expectNoSecret(res, url);
    expect(res.body).toEqual({
      status: 'ok',
      error: null,
      destination: {
        ...created,
        updated_at: expect.stringMatching(ISO_MS),
        last_test_at: expect.stringMatching(ISO_MS),
        last_test_status: 'ok',
        last_test_error: null,
      },
    });

    const [delivery, ...more] = deliveredTo(url);
    expect(more).toEqual([]);
    expect(delivery!.method).toBe('POST');
    expect(delivery!.headers['content-type']).toMatch(/^application\/json/);
    const payload = JSON.parse(delivery!.body);
    expect(payload).toEqual({ text: expect.any(String) });
    expect(payload.text).toContain('#ops-alerts');
    expect(payload.text).toContain('Acme Robotics');
    expect(payload.text).toContain('member.joined');

    const fetched = await client.op('getNotificationDestination', { params: { id: created.id } });
    expect(fetched.body).toEqual(res.body.destination);
    expect((await storedRow(created.id))!.last_test_status).toBe('ok');
  });

  it('puts the subject prefix before the Slack text', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url, { config: { webhook_url: url, subject_prefix: '[Acme MCP]' } }));
    await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(JSON.parse(deliveredTo(url)[0]!.body).text).toMatch(/^\[Acme MCP\] /);
  });

  it('answers 200 with status failed naming the status when the webhook answers 500, and records it', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url));
    peers.receiver.respondWith({ status: 500, body: 'upstream broke' });

    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('failed');
    expect(res.body.error).toEqual(expect.stringContaining('500'));
    expectNoSecret(res, url);
    expect(res.body.destination).toMatchObject({ last_test_status: 'failed', last_test_error: res.body.error, last_test_at: expect.stringMatching(ISO_MS) });
    expect(deliveredTo(url)).toHaveLength(1);

    const fetched = await client.op('getNotificationDestination', { params: { id: created.id } });
    expect(fetched.body).toMatchObject({ last_test_status: 'failed', last_test_error: res.body.error, last_test_at: res.body.destination.last_test_at });
  });

  it('clears the recorded error when a later test succeeds', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url));
    peers.receiver.respondWith({ status: 404, body: 'no_team' });
    expect((await client.op('testNotificationDestination', { params: { id: created.id } })).body).toMatchObject({
      status: 'failed',
      error: expect.stringContaining('404'),
    });
    peers.receiver.respondWith({ status: 200, body: 'ok' });
    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.body).toMatchObject({ status: 'ok', error: null, destination: { last_test_status: 'ok', last_test_error: null } });
  });

  it('does not follow a redirect from the webhook; it reports the status', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url));
    peers.receiver.respondWith({ status: 302, body: '' });
    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.body).toMatchObject({ status: 'failed', error: expect.stringContaining('302') });
    expect(deliveredTo(url)).toHaveLength(1);
  });

  it('answers status failed when nothing listens at the webhook', async () => {
    const closed = await startHttpReceiver();
    const url = hookUrl(closed.url);
    await closed.close();
    const { client } = await newOrg();
    const created = await create(client, slackBody(url));
    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'failed', error: expect.any(String), destination: { last_test_status: 'failed' } });
    expectNoSecret(res, url);
  });

  it('emails to, cc and bcc through SMTP with the subject prefix, and records ok', async () => {
    const { client } = await newOrg(t, { name: 'Acme Robotics' });
    const to = mailbox('to');
    const cc = mailbox('cc');
    const bcc = mailbox('bcc');
    const created = await create(
      client,
      emailBody({
        name: 'Mail test',
        config: { to: [to], cc: [cc], bcc: [bcc], subject_prefix: '[Acme MCP]' },
        event_types: ['invite.sent'],
      }),
    );

    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'ok', error: null, destination: { id: created.id, last_test_status: 'ok', last_test_error: null } });

    const messages = mailFor(to);
    expect(messages).toHaveLength(1);
    const [message] = messages;
    expect([...message!.to].sort()).toEqual([to, cc, bcc].sort());
    const headers = headersOf(message!.raw);
    expect(headers).toMatch(/^Subject: \[Acme MCP\] \S/m);
    expect(headers).toMatch(new RegExp(`^To: ${to}$`, 'm'));
    expect(headers).toMatch(new RegExp(`^Cc: ${cc}$`, 'm'));
    expect(headers).not.toMatch(/^Bcc:/im);
    expect(message!.raw).not.toContain(bcc);
    expect(message!.raw).toContain('Mail test');
    expect(message!.raw).toContain('Acme Robotics');

    expect((await client.op('getNotificationDestination', { params: { id: created.id } })).body).toEqual(res.body.destination);
  });

  it('sends a subject without a prefix when none is set', async () => {
    const { client } = await newOrg();
    const to = mailbox('plain');
    const created = await create(client, emailBody({ config: { to: [to] } }));
    await client.op('testNotificationDestination', { params: { id: created.id } });
    const [message] = mailFor(to);
    expect(headersOf(message!.raw)).toMatch(/^Subject: [^\s[]/m);
  });

  it('keeps a line break in the subject prefix from adding headers or recipients', async () => {
    const { client } = await newOrg();
    const to = mailbox('inject');
    const attacker = mailbox('attacker');
    const created = await create(client, emailBody({ config: { to: [to], subject_prefix: `[A]\r\nBcc: ${attacker}` } }));
    expect((await client.op('testNotificationDestination', { params: { id: created.id } })).body.status).toBe('ok');
    const [message] = mailFor(to);
    expect(message!.to).toEqual([to]);
    expect(headersOf(message!.raw)).not.toMatch(/^Bcc:/im);
    expect(mailFor(attacker)).toEqual([]);
  });

  it('tests a paused destination too, and leaves it paused', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url, { is_active: false }));
    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.body).toMatchObject({ status: 'ok', destination: { is_active: false, last_test_status: 'ok' } });
    expect(deliveredTo(url)).toHaveLength(1);
  });

  it('answers 404 not_found for an unknown id and 400 for a malformed one', async () => {
    const { client } = await newOrg();
    expectError(await client.op('testNotificationDestination', { params: { id: newId('notificationDestination') } }), 404, 'not_found');
    expectValidation(await client.op('testNotificationDestination', { params: { id: 'onfd_' } }), [problem('/id', undefined, 'path')]);
  });

  describe('with an SMTP server that rejects recipients', () => {
    let rejecting: Awaited<ReturnType<typeof startSmtpServer>>;
    let app: TestApp;
    beforeAll(async () => {
      rejecting = await startSmtpServer({ reject: true });
      app = await startTestApp({ env: { SMTP_URL: rejecting.url } });
    });
    afterAll(async () => {
      await app.close();
      await rejecting.close();
    });

    it('answers 200 with status failed and the server’s reply, and records it', async () => {
      const { client, orgId } = await newOrg(app);
      const created = await create(client, emailBody());
      const res = await client.op('testNotificationDestination', { params: { id: created.id } });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        status: 'failed',
        error: expect.stringContaining('550'),
        destination: { id: created.id, last_test_status: 'failed', last_test_at: expect.stringMatching(ISO_MS) },
      });
      expect(res.body.destination.last_test_error).toBe(res.body.error);
      expect(rejecting.messages).toEqual([]);
      expect((await client.op('getNotificationDestination', { params: { id: created.id } })).body).toEqual(res.body.destination);
      expect((await destinationAudit(orgId, app)).map((e) => e.action)).toEqual(['notification_destination.created', 'notification_destination.tested']);
    });
  });
});

describe('listNotificationDestinations', () => {
  it('answers an empty page for an organization without destinations', async () => {
    const { client } = await newOrg();
    const res = await client.op('listNotificationDestinations');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [], next_cursor: null });
  });

  it('lists the organization’s destinations oldest first, exactly as GET returns them', async () => {
    const { client } = await newOrg();
    const other = await newOrg();
    await create(other.client, emailBody({ name: 'Not ours' }));
    const url = hookUrl();
    const a = await create(client, emailBody({ name: 'A' }));
    const b = await create(client, slackBody(url, { name: 'B' }));
    const c = await create(client, emailBody({ name: 'C', is_active: false }));

    const res = await client.op('listNotificationDestinations');
    expect(res.body).toEqual({ data: [a, b, c], next_cursor: null });
    expectNoSecret(res, url);
  });

  it('filters by type, by is_active, and by both', async () => {
    const { client } = await newOrg();
    const emailOn = await create(client, emailBody({ name: 'email on' }));
    const slackOn = await create(client, slackBody(hookUrl(), { name: 'slack on' }));
    const emailOff = await create(client, emailBody({ name: 'email off', is_active: false }));
    const slackOff = await create(client, slackBody(hookUrl(), { name: 'slack off', is_active: false }));
    const ids = async (query: string) => {
      const res = await client.get(`${LIST}${query}`);
      expect(res.status).toBe(200);
      return res.body.data.map((d: { id: string }) => d.id);
    };
    expect(await ids('?type=email')).toEqual([emailOn.id, emailOff.id]);
    expect(await ids('?type=slack')).toEqual([slackOn.id, slackOff.id]);
    expect(await ids('?is_active=true')).toEqual([emailOn.id, slackOn.id]);
    expect(await ids('?is_active=false')).toEqual([emailOff.id, slackOff.id]);
    expect(await ids('?type=slack&is_active=false')).toEqual([slackOff.id]);
    expect(await ids('?type=email&is_active=true&limit=1')).toEqual([emailOn.id]);
  });

  async function walk(client: Client, query: string) {
    const pages: { id: string }[][] = [];
    let cursor: string | null = null;
    do {
      const res: TestResponse = await client.get(`${LIST}?${query}${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.status).toBe(200);
      pages.push(res.body.data);
      cursor = res.body.next_cursor;
      expect(pages.length).toBeLessThan(20);
    } while (cursor !== null);
    return pages;
  }

  it('walks pages of 2 over 5 destinations, returning each exactly once in creation order', async () => {
    const { client } = await newOrg();
    const created: string[] = [];
    for (let i = 1; i <= 5; i += 1) created.push((await create(client, emailBody({ name: `Destination ${i}` }))).id);

    const pages = await walk(client, 'limit=2');
    expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
    expect(pages.flat().map((d) => d.id)).toEqual(created);
  });

  it('ends with next_cursor null when the last page is exactly full', async () => {
    const { client } = await newOrg();
    const created: string[] = [];
    for (let i = 1; i <= 4; i += 1) created.push((await create(client, emailBody({ name: `Destination ${i}` }))).id);
    const first = await client.op('listNotificationDestinations', { query: { limit: 4 } });
    expect(first.body.next_cursor).toBeNull();
    const pages = await walk(client, 'limit=2');
    expect(pages.map((p) => p.length)).toEqual([2, 2]);
    expect(pages.flat().map((d) => d.id)).toEqual(created);
  });

  it('walks a filtered list page by page', async () => {
    const { client } = await newOrg();
    const emails: string[] = [];
    for (let i = 1; i <= 5; i += 1) {
      emails.push((await create(client, emailBody({ name: `email ${i}` }))).id);
      await create(client, slackBody(hookUrl(), { name: `slack ${i}` }));
    }
    const pages = await walk(client, 'type=email&limit=2');
    expect(pages.flat().map((d) => d.id)).toEqual(emails);
  });

  it('continues after a cursor whose destination was deleted meanwhile', async () => {
    const { client } = await newOrg();
    const created: string[] = [];
    for (let i = 1; i <= 4; i += 1) created.push((await create(client, emailBody({ name: `Destination ${i}` }))).id);
    const first = await client.op('listNotificationDestinations', { query: { limit: 2 } });
    await client.op('deleteNotificationDestination', { params: { id: created[1]! } });
    const second = await client.op('listNotificationDestinations', { query: { limit: 2, cursor: first.body.next_cursor ?? undefined } });
    expect(second.body.data.map((d: { id: string }) => d.id)).toEqual(created.slice(2));
    expect(second.body.next_cursor).toBeNull();
  });

  it('answers 400 invalid_cursor for a cursor it did not issue', async () => {
    const { client } = await newOrg();
    const foreign = Buffer.from(newId('user'), 'utf8').toString('base64url');
    for (const cursor of ['garbage', foreign, 'b25mZF8']) {
      expectError(await client.get(`${LIST}?cursor=${cursor}`), 400, 'invalid_cursor');
    }
  });

  it('answers 400 validation_failed for a cursor with characters a cursor never has', async () => {
    const { client } = await newOrg();
    expectValidation(await client.get(`${LIST}?cursor=${encodeURIComponent('a+b/c=')}`), [problem('/cursor', undefined, 'query')]);
  });

  it.each([['0'], ['201'], ['-1'], ['2.5'], ['ten']])('answers 400 validation_failed for limit=%s', async (limit) => {
    const { client } = await newOrg();
    expectValidation(await client.get(`${LIST}?limit=${limit}`), [problem('/limit', undefined, 'query')]);
  });

  it('accepts limit 1 and limit 200', async () => {
    const { client } = await newOrg();
    await create(client, emailBody({ name: 'one' }));
    await create(client, emailBody({ name: 'two' }));
    const one = await client.op('listNotificationDestinations', { query: { limit: 1 } });
    expect(one.body.data).toHaveLength(1);
    expect(one.body.next_cursor).toEqual(expect.any(String));
    const all = await client.op('listNotificationDestinations', { query: { limit: 200 } });
    expect(all.body.data).toHaveLength(2);
    expect(all.body.next_cursor).toBeNull();
  });

  it('answers 400 validation_failed for an unknown type, a non-boolean is_active and an unknown parameter', async () => {
    const { client } = await newOrg();
    expectValidation(await client.get(`${LIST}?type=webhook`), [problem('/type', undefined, 'query')]);
    expectValidation(await client.get(`${LIST}?is_active=maybe`), [problem('/is_active', 'must be boolean', 'query')]);
    expectValidation(await client.get(`${LIST}?name=Ops`), [problem('/name', 'is not a parameter of this operation', 'query')]);
    expect((await client.get(`${LIST}?limit=2&limit=3`)).body.errors).toEqual([problem('/limit', undefined, 'query')]);
    expectError(await client.get(`${LIST}?type=email&type=slack`), 400, 'validation_failed');
  });
});

// ---------------------------------------------------------------------------------------
// Across the six operations
// ---------------------------------------------------------------------------------------

interface OperationCase {
  operationId: string;
  permission: 'notification:view' | 'notification:manage';
  send: (client: Client, id: string) => Promise<TestResponse>;
}

const OPERATIONS: OperationCase[] = [
  { operationId: 'listNotificationDestinations', permission: 'notification:view', send: (c) => c.get(LIST) },
  { operationId: 'createNotificationDestination', permission: 'notification:manage', send: (c) => c.post(LIST, emailBody({ name: `New ${unique()}` })) },
  { operationId: 'getNotificationDestination', permission: 'notification:view', send: (c, id) => c.get(itemPath(id)) },
  {
    operationId: 'updateNotificationDestination',
    permission: 'notification:manage',
    send: (c, id) => c.patch(itemPath(id), { name: 'Renamed', is_active: false }),
  },
  { operationId: 'deleteNotificationDestination', permission: 'notification:manage', send: (c, id) => c.delete(itemPath(id)) },
  { operationId: 'testNotificationDestination', permission: 'notification:manage', send: (c, id) => c.post(testPath(id)) },
];
const READS = OPERATIONS.filter((op) => op.permission === 'notification:view');
const WRITES = OPERATIONS.filter((op) => op.permission === 'notification:manage');

/** An organization with one Slack destination, for checking that nothing happened to it. */
async function orgWithDestination() {
  const org = await newOrg();
  const url = hookUrl();
  const destination = await create(org.client, slackBody(url));
  const row = await storedRow(destination.id);
  return {
    ...org,
    url,
    destination,
    async expectUnchanged() {
      expect((await org.client.op('getNotificationDestination', { params: { id: destination.id } })).body).toEqual(destination);
      expect(await storedRow(destination.id)).toEqual(row);
      expect(deliveredTo(url)).toEqual([]);
      expect(await countRows(org.orgId)).toBe(1);
      expect(await destinationAudit(org.orgId)).toHaveLength(1);
    },
  };
}

describe('permissions', () => {
  it('answers 403 missing_permission on every operation to a member with the system member role', async () => {
    const org = await orgWithDestination();
    const userId = await t.factories.member(org.orgId, { roles: ['member'] });
    const clients = [
      t.as({ session: await t.factories.session(userId), org: org.orgId }),
      t.as({ token: await t.factories.token(org.orgId, userId), org: org.orgId }),
    ];
    for (const client of clients) {
      for (const op of OPERATIONS) {
        const res = await op.send(client, org.destination.id);
        expectError(res, 403, 'missing_permission');
        expect(res.body.detail).toContain(op.permission);
      }
    }
    await org.expectUnchanged();
  });

  it('lets a token limited to notification:view list and get, and refuses it every change', async () => {
    const org = await orgWithDestination();
    const viewer = t.as({ token: await t.factories.token(org.orgId, org.ownerId, ['notification:view']), org: org.orgId });
    for (const op of READS) expect((await op.send(viewer, org.destination.id)).status).toBe(200);
    for (const op of WRITES) {
      const res = await op.send(viewer, org.destination.id);
      expectError(res, 403, 'missing_permission');
      expect(res.body.detail).toContain('notification:manage');
    }
    await org.expectUnchanged();
  });

  it('lets an auditor read, and refuses the auditor every change', async () => {
    const org = await orgWithDestination();
    const auditorId = await t.factories.member(org.orgId, { roles: ['auditor'] });
    const auditor = t.as({ session: await t.factories.session(auditorId), org: org.orgId });
    const list = await auditor.get(LIST);
    expect(list.body).toEqual({ data: [org.destination], next_cursor: null });
    expect((await auditor.get(itemPath(org.destination.id))).body).toEqual(org.destination);
    for (const op of WRITES) expectError(await op.send(auditor, org.destination.id), 403, 'missing_permission');
    await org.expectUnchanged();
  });

  it('lets an admin member do everything', async () => {
    const org = await orgWithDestination();
    const adminId = await t.factories.member(org.orgId, { roles: ['admin'] });
    const admin = t.as({ session: await t.factories.session(adminId), org: org.orgId });
    const statuses = [];
    for (const op of OPERATIONS) statuses.push((await op.send(admin, org.destination.id)).status);
    expect(statuses).toEqual([200, 201, 200, 200, 204, 404]);
  });

  it('checks the permission before validating the body', async () => {
    const org = await orgWithDestination();
    const viewer = t.as({ token: await t.factories.token(org.orgId, org.ownerId, ['notification:view']), org: org.orgId });
    expectError(await viewer.post(LIST, { nonsense: true }), 403, 'missing_permission');
    expectError(await viewer.patch(itemPath(org.destination.id), { type: 'email' }), 403, 'missing_permission');
  });
});

describe('credentials', () => {
  it('answers 401 invalid_token on every operation for a token that does not exist', async () => {
    const org = await orgWithDestination();
    const forged = t.as({ token: `${org.token.slice(0, -6)}zzzzzz`, org: org.orgId });
    for (const op of OPERATIONS) {
      const res = await op.send(forged, org.destination.id);
      expectError(res, 401, 'invalid_token');
      expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"');
    }
    await org.expectUnchanged();
  });
});

describe('tenant isolation', () => {
  // 404 for another organization's destination on every operation, and the destination left
  // as it was: every-operation.test.ts, from test/fixtures/notification-destinations.ts.
  it('lists none of another organization’s destinations, and records nothing for the one that asked', async () => {
    const a = await newOrg();
    const b = await orgWithDestination();
    expectError(
      await a.client.op('updateNotificationDestination', { params: { id: b.destination.id }, body: { config: { webhook_url: hookUrl() } } }),
      404,
      'not_found',
    );
    expect((await a.client.op('listNotificationDestinations')).body).toEqual({ data: [], next_cursor: null });
    expect(await destinationAudit(a.orgId)).toEqual([]);
    await b.expectUnchanged();
  });

  it('does not let a cursor carry one organization’s list into another’s', async () => {
    const a = await newOrg();
    const b = await newOrg();
    await create(a.client, emailBody({ name: 'A1' }));
    await create(a.client, emailBody({ name: 'A2' }));
    const bOnly = await create(b.client, emailBody({ name: 'B1' }));
    const page = await a.client.op('listNotificationDestinations', { query: { limit: 1 } });
    const res = await b.client.op('listNotificationDestinations', { query: { cursor: page.body.next_cursor ?? undefined } });
    expect(res.status).toBe(200);
    expect(res.body.data.map((d: { id: string }) => d.id)).toEqual([bOnly.id]);
  });

  it('answers 403 not_a_member when A’s token names B’s organization', async () => {
    const a = await newOrg();
    const b = await orgWithDestination();
    const crossed = t.as({ token: a.token, org: b.orgId });
    for (const op of OPERATIONS) expectError(await op.send(crossed, b.destination.id), 403, 'not_a_member');
    await b.expectUnchanged();
  });
});

describe('audit', () => {
  it('writes exactly one entry per change, by the token, never holding the webhook URL', async () => {
    const { client, orgId, ownerId, token } = await newOrg();
    const tokenId = await t.factories.tokenId(token);
    const firstUrl = hookUrl();
    const secondUrl = hookUrl();
    const secrets = [firstUrl, secondUrl, new URL(firstUrl).pathname, new URL(secondUrl).pathname];

    const steps: [string, () => Promise<TestResponse>][] = [];
    let id = '';
    steps.push([
      'notification_destination.created',
      async () => {
        const res = await client.op('createNotificationDestination', {
          body: slackBody(firstUrl, { config: { webhook_url: firstUrl, subject_prefix: '[A]' } }),
        });
        id = res.body.id;
        return res;
      },
    ]);
    steps.push([
      'notification_destination.updated',
      () => client.op('updateNotificationDestination', { params: { id }, body: { name: 'Renamed', config: { webhook_url: secondUrl } } }),
    ]);
    steps.push(['notification_destination.tested', () => client.op('testNotificationDestination', { params: { id } })]);
    steps.push(['notification_destination.deleted', () => client.op('deleteNotificationDestination', { params: { id } })]);

    for (const [action, run] of steps) {
      const before = await destinationAudit(orgId);
      const res = await run();
      expect(res.status).toBeLessThan(300);
      // Reads in between write nothing.
      await client.op('listNotificationDestinations');
      const after = await destinationAudit(orgId);
      expect(after).toHaveLength(before.length + 1);
      const entry = after[after.length - 1]!;
      expect(entry).toMatchObject({
        org_id: orgId,
        action,
        target_type: 'notification_destination',
        target_id: id,
        actor_type: 'api_token',
        actor_id: tokenId,
        actor_user_id: ownerId,
        request_id: res.headers.get('x-request-id'),
      });
      const changes = JSON.stringify(entry.changes);
      for (const secret of secrets) expect(changes).not.toContain(secret);
      if (action === 'notification_destination.updated') {
        expect(Object.keys(entry.changes).sort()).toEqual(['name', 'webhook_url']);
        expect(entry.changes.webhook_url).toEqual({ changed: true });
        expect(entry.changes.name).toEqual({ from: expect.any(String), to: 'Renamed' });
      }
    }
    expect((await destinationAudit(orgId)).map((e) => e.action)).toEqual(steps.map(([action]) => action));
  });

  it('records a failed test too', async () => {
    const { client, orgId } = await newOrg();
    const created = await create(client, slackBody(hookUrl()));
    peers.receiver.respondWith({ status: 500 });
    expect((await client.op('testNotificationDestination', { params: { id: created.id } })).body.status).toBe('failed');
    const entries = await destinationAudit(orgId);
    expect(entries.map((e) => e.action)).toEqual(['notification_destination.created', 'notification_destination.tested']);
    expect(entries[1]!.target_id).toBe(created.id);
  });

  it('writes nothing for refused requests', async () => {
    const { client, orgId } = await newOrg();
    const created = await create(client, emailBody({ name: 'Taken' }));
    await client.op('createNotificationDestination', { body: emailBody({ name: 'Taken' }) });
    await client.op('createNotificationDestination', { body: emailBody({ event_types: [] }) });
    await client.op('updateNotificationDestination', { params: { id: created.id }, body: { type: 'slack' } });
    await client.op('updateNotificationDestination', { params: { id: newId('notificationDestination') }, body: { name: 'x' } });
    await client.op('deleteNotificationDestination', { params: { id: newId('notificationDestination') } });
    await client.op('testNotificationDestination', { params: { id: newId('notificationDestination') } });
    expect((await destinationAudit(orgId)).map((e) => e.action)).toEqual(['notification_destination.created']);
  });
});

describe('Slack webhook hosts', () => {
  it('takes only Slack’s webhook host by default, and the compatible hosts the operator lists', async () => {
    const defaults = await startTestApp({ env: { SLACK_WEBHOOK_HOSTS: '' } });
    try {
      const { client } = await newOrg(defaults);
      expect((await client.op('createNotificationDestination', { body: slackBody('https://hooks.slack.com/services/T000/B000/XXXXXXXX') })).status).toBe(201);
      const elsewhere = await client.op('createNotificationDestination', {
        body: slackBody('https://webhooks.example.com/services/T000/B000/XXXXXXXX', { name: 'Elsewhere' }),
      });
      expectError(elsewhere, 400, 'outbound_url_not_allowed');
      expect(elsewhere.error?.errors).toEqual([problem('/config/webhook_url', 'must be a Slack incoming webhook on hooks.slack.com')]);
    } finally {
      await defaults.close();
    }
    const listed = await startTestApp({ env: { SLACK_WEBHOOK_HOSTS: 'hooks.slack.com,chat.example.com' } });
    try {
      const { client } = await newOrg(listed);
      expect((await client.op('createNotificationDestination', { body: slackBody('https://chat.example.com/hooks/abc') })).status).toBe(201);
    } finally {
      await listed.close();
    }
  });
});

describe('an outbound call’s deadline', () => {
  it('gives up on a receiver that keeps the connection alive a byte at a time, and says so', async () => {
    const { client } = await newOrg();
    const url = hookUrl();
    const created = await create(client, slackBody(url));
    // OUTBOUND_TIMEOUT_MS is 3000 in tests; the receiver would take 10 s to finish.
    peers.receiver.respondWith({ status: 200, drip: { everyMs: 100, forMs: 10_000 } });
    const res = await client.op('testNotificationDestination', { params: { id: created.id } });
    expect(res.body).toMatchObject({ status: 'failed', error: 'No answer within 3 seconds.' });
  });
});

describe('with NOTIFICATION_TEST_COOLDOWN_SECONDS=60', () => {
  let cool: TestApp;
  beforeAll(async () => {
    cool = await startTestApp({ env: { SMTP_URL: peers.smtp.url, NOTIFICATION_TEST_COOLDOWN_SECONDS: '60' } });
  });
  afterAll(() => cool.close());

  it('sends one test message per destination per minute, and answers the next with 429 and Retry-After', async () => {
    const { client } = await newOrg(cool);
    const to = mailbox('cooldown');
    const first = await create(client, emailBody({ config: { to: [to] } }));
    const second = await create(client, emailBody({ name: 'Other', config: { to: [to] } }));
    expect((await client.op('testNotificationDestination', { params: { id: first.id } })).body.status).toBe('ok');
    const again = await client.op('testNotificationDestination', { params: { id: first.id } });
    expectError(again, 429, 'rate_limited');
    expect(Number(again.headers.get('retry-after'))).toBeGreaterThanOrEqual(59);
    expect((await client.op('testNotificationDestination', { params: { id: second.id } })).body.status).toBe('ok');
    expect(mailFor(to)).toHaveLength(2);
    expect(
      (await destinationAudit((await storedRow(first.id, cool))!.org_id, cool)).filter((e) => e.action === 'notification_destination.tested'),
    ).toHaveLength(2);
  });

  it('lets one of two simultaneous tests through', async () => {
    const { client } = await newOrg(cool);
    const to = mailbox('race');
    const destination = await create(client, emailBody({ config: { to: [to] } }));
    const answers = await Promise.all([
      client.op('testNotificationDestination', { params: { id: destination.id } }),
      client.op('testNotificationDestination', { params: { id: destination.id } }),
      client.op('testNotificationDestination', { params: { id: destination.id } }),
    ]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 429, 429]);
    expect(mailFor(to)).toHaveLength(1);
  });
});

describe('with OUTBOUND_ALLOW_LOOPBACK=false', () => {
  let strict: TestApp;
  beforeAll(async () => {
    strict = await startTestApp({ env: { OUTBOUND_ALLOW_LOOPBACK: 'false' } });
  });
  afterAll(() => strict.close());

  const port = () => new URL(peers.receiver.url).port;
  const loopbackUrls = () => [
    hookUrl(),
    `https://127.0.0.1:${port()}/services/T0/B0/${unique()}`,
    `http://127.8.9.10:${port()}/services/T0/B0/${unique()}`,
    `http://localhost:${port()}/services/T0/B0/${unique()}`,
    `https://api.localhost/services/T0/B0/${unique()}`,
    `http://[::1]:${port()}/services/T0/B0/${unique()}`,
    `http://[::ffff:127.0.0.1]:${port()}/services/T0/B0/${unique()}`,
  ];

  it('answers 400 outbound_url_not_allowed for loopback webhook URLs on create, and writes nothing', async () => {
    const { client, orgId } = await newOrg(strict);
    for (const url of loopbackUrls()) {
      const res = await client.op('createNotificationDestination', { body: slackBody(url) });
      expectError(res, 400, 'outbound_url_not_allowed');
      expect(res.error?.errors).toEqual([problem('/config/webhook_url')]);
      expectNoSecret(res, url);
    }
    expect(await countRows(orgId, strict)).toBe(0);
    expect(await destinationAudit(orgId, strict)).toEqual([]);
  });

  it('answers 400 outbound_url_not_allowed for a loopback webhook URL on update, and keeps the old one', async () => {
    const { client } = await newOrg(strict);
    const created = await create(client, slackBody(`https://hooks.slack.com/services/T000/B000/${unique()}`));
    const before = await storedRow(created.id, strict);
    for (const url of loopbackUrls()) {
      expectError(
        await client.op('updateNotificationDestination', { params: { id: created.id }, body: { config: { webhook_url: url } } }),
        400,
        'outbound_url_not_allowed',
      );
    }
    expect(await storedRow(created.id, strict)).toEqual(before);
  });

  it('tells the customer only that a host resolving to an internal address could not be reached', async () => {
    // The machine's own name is no literal address and no `localhost`: only resolving it shows
    // where it leads (here, /etc/hosts maps it to loopback).
    const host = hostname();
    const resolved = await lookup(host).catch(() => null);
    if (!resolved || classifyAddress(resolved.address) === 'public')
      return console.warn(`${host} does not resolve to an internal address here; nothing to test.`);
    const { client, orgId, ownerId } = await newOrg(strict);
    const url = `https://${host}:${new URL(peers.receiver.url).port}/services/T1/B1/${unique()}`;
    const id = newId('notificationDestination');
    await strict.db
      .insertInto('notification_destinations')
      .values({
        id,
        org_id: orgId,
        name: 'Resolves inside',
        type: 'slack',
        config: JSON.stringify({ to: [], cc: [], bcc: [], subject_prefix: null }),
        webhook_url_enc: strict.deps.secrets.seal(url, `notification_destinations.webhook_url:${id}`),
        event_types: ['member.joined'],
        is_active: true,
        created_by_user_id: ownerId,
      })
      .execute();
    const res = await client.op('testNotificationDestination', { params: { id } });
    expect(res.body).toMatchObject({ status: 'failed', error: 'The destination could not be reached from this server.' });
    expect(res.text).not.toMatch(/loopback|private|127\.0\.0\.1/);
    expect(deliveredTo(url)).toEqual([]);
  });

  it('refuses at send time a stored webhook URL that points to loopback, and records the failure', async () => {
    const { client, orgId, ownerId } = await newOrg(strict);
    const url = hookUrl();
    // Written directly: the API no longer accepts such a URL, but one stored while the
    // operator allowed loopback (or a host that resolves there later) must still not be called.
    const id = newId('notificationDestination');
    await strict.db
      .insertInto('notification_destinations')
      .values({
        id,
        org_id: orgId,
        name: 'Stored earlier',
        type: 'slack',
        config: JSON.stringify({ to: [], cc: [], bcc: [], subject_prefix: null }),
        webhook_url_enc: strict.deps.secrets.seal(url, `notification_destinations.webhook_url:${id}`),
        event_types: ['member.joined'],
        is_active: true,
        created_by_user_id: ownerId,
      })
      .execute();

    const res = await client.op('testNotificationDestination', { params: { id } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'failed', error: expect.stringContaining('loopback'), destination: { id, last_test_status: 'failed' } });
    expectNoSecret(res, url);
    expect(deliveredTo(url)).toEqual([]);
  });
});

describe('with OUTBOUND_ALLOW_PRIVATE=true and OUTBOUND_ALLOW_LOOPBACK=false', () => {
  let privateOnly: TestApp;
  beforeAll(async () => {
    privateOnly = await startTestApp({
      env: { OUTBOUND_ALLOW_LOOPBACK: 'false', OUTBOUND_ALLOW_PRIVATE: 'true', SLACK_WEBHOOK_HOSTS: 'hooks.slack.com,10.1.2.3' },
    });
  });
  afterAll(() => privateOnly.close());

  it('refuses the unspecified address, which reaches loopback', async () => {
    const { client, orgId } = await newOrg(privateOnly);
    const port = new URL(peers.receiver.url).port;
    for (const url of [`http://0.0.0.0:${port}/services/T0/B0/${unique()}`, `http://[::]:${port}/services/T0/B0/${unique()}`]) {
      expectError(await client.op('createNotificationDestination', { body: slackBody(url) }), 400, 'outbound_url_not_allowed');
      expect(deliveredTo(url)).toEqual([]);
    }
    expect(await countRows(orgId, privateOnly)).toBe(0);
  });

  it('still refuses 127.0.0.0/8 and ::1', async () => {
    const { client } = await newOrg(privateOnly);
    const port = new URL(peers.receiver.url).port;
    for (const url of [`http://127.0.0.1:${port}/services/T0/B0/${unique()}`, `http://[::1]:${port}/services/T0/B0/${unique()}`]) {
      expectError(await client.op('createNotificationDestination', { body: slackBody(url) }), 400, 'outbound_url_not_allowed');
    }
  });

  it('accepts a private address', async () => {
    const { client } = await newOrg(privateOnly);
    expect((await client.op('createNotificationDestination', { body: slackBody('https://10.1.2.3/services/T000/B000/PRIVATEOK') })).status).toBe(201);
  });
});
