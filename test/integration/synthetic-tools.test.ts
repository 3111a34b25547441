import type { components } from '../../generated/openapi';
import { insertConnector } from '../../src/areas/connectors/connectors.repo';
import { findSyntheticTool, runSyntheticTool } from '../../src/areas/synthetic-tools';
import { PLANS } from '../../src/access/entitlements';
import { auditDigest } from '../../src/http/context';
import { PERMISSIONS } from '../../src/identity/permissions';
import { shareResource } from '../../src/access/shares';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { eventsOf, expectError } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';

/*
 * Synthetic tools over HTTP against the real app, every step calling a real upstream MCP
 * server on loopback (the peers' API-key server, which records the key of every request):
 * saving with its reference checks, execution with mapping across steps, the failing step,
 * deadlines, each caller's own connection, pinned connections, restrictions, deletion.
 */

type Schemas = components['schemas'];
const KEY_A = 'key-alice-Syn7h3t1c';
const KEY_B = 'key-bob-Syn7h3t1c';
const STEP_TIMEOUT_MS = 1000;

const up = useUpstream(() =>
  startApiKeyUpstream({
    keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' },
    tools: [
      {
        name: 'lookup',
        description: 'Reads a ticket.',
        inputSchema: { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] },
        call: (args, caller) => ({
          content: [{ type: 'text', text: `ticket ${String(args.id)}` }],
          structuredContent: { id: args.id, subject: `Ticket ${String(args.id)}`, status: 'open', member: caller.member, credential: caller.credential },
        }),
      },
      {
        name: 'update',
        description: 'Changes a ticket; answers JSON as text.',
        call: (args, caller) => ({
          content: [{ type: 'text', text: JSON.stringify({ updated: args.id, status: args.status, note: args.note, by: caller.member }) }],
        }),
      },
      {
        name: 'fail',
        description: 'Always answers with a tool error.',
        call: (args) => ({ isError: true, content: [{ type: 'text', text: `ticket ${String(args.id)} not found` }] }),
      },
    ],
  }),
);

let t: TestApp;
let org: SeededOrg;
let other: SeededOrg;
let aliceId: string;
let bobId: string;
let carolId: string;
let crm: string;
let discovered: string;
let aliceConn: string;
let bobConn: string;

type Credential = { token: string; org: string };
/** Callers: `op` sends an operation by id as one member, and get, post… send raw requests. */
type Caller = ReturnType<TestApp['as']>;
let owner: Caller;
let alice: Caller;
let bob: Caller;
let carol: Caller;

async function connector(slug: string, tools: string[]): Promise<string> {
  await insertConnector(t.db, {
    org_id: org.orgId,
    slug,
    content: {
      name: `Connector ${slug}`,
      description: null,
      icon_url: null,
      mcp_url: `${up.peer.origin}/mcp`,
      transport: 'streamable_http',
      auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
      tools: tools.map((name) => ({ name, title: null, description: `${name}.`, input_schema: { type: 'object' } })),
      documentation: [],
    },
    client_secret_enc: null,
    upstream_slug: null,
    upstream_version: null,
    linked_at: null,
    created_by_user_id: null,
  });
  await shareResource(t.db, {
    orgId: org.orgId,
    resourceType: 'connector',
    resourceId: slug,
    share: { principal: { type: 'organization', id: org.orgId }, level: 'use' },
    byUserId: null,
  });
  return slug;
}

async function connect(credential: Credential, slug: string, apiKey: string): Promise<string> {
  const res = await t.as(credential).post('/connection', { connector_slug: slug, api_key: apiKey });
  if (res.status !== 201) throw new Error(`connection: ${res.status} ${res.text}`);
  return res.body.id as string;
}

const ticketInput = {
  type: 'object' as const,
  properties: { ticket_id: { type: 'integer' }, note: { type: 'string', default: 'none given' } },
  required: ['ticket_id'],
  additionalProperties: false,
};

/** Looks a ticket up, then updates it with values mapped from the lookup's result and the input. */
function lookupThenUpdate(name: string, extra: Partial<Schemas['SyntheticToolCreate']> = {}): Schemas['SyntheticToolCreate'] {
  return {
    name,
    description: 'Looks a ticket up, then closes it.',
    input_schema: ticketInput,
    steps: [
      { id: 'lookup', tool: { connector_slug: crm, name: 'lookup' }, arguments: { id: { $input: '/ticket_id' } } },
      {
        id: 'update',
        tool: { connector_slug: crm, name: 'update' },
        arguments: {
          id: { $step: 'lookup', pointer: '/id' },
          status: { $literal: 'closed' },
          note: { $template: 'was {{step:lookup:/status}} ({{input:/note}}) {{{{literal}}' },
        },
      },
    ],
    output: {
      ticket: { $step: 'lookup' },
      updated: { $step: 'update' },
      who: [
        { $step: 'lookup', pointer: '/member' },
        { $step: 'update', pointer: '/by' },
      ],
    },
    ...extra,
  };
}

async function created(body: Schemas['SyntheticToolCreate'], as = owner): Promise<Schemas['SyntheticTool']> {
  const res = await as.op('createSyntheticTool', { body });
  if (res.status !== 201) throw new Error(`create: ${res.status} ${res.text}`);
  return res.body;
}

const seenSince = (mark: number) => up.peer.seen.slice(mark).filter((s) => s.rpc?.includes('tools/call'));

beforeAll(async () => {
  t = await startTestApp({ env: { SYNTHETIC_STEP_TIMEOUT_MS: String(STEP_TIMEOUT_MS) } });
  org = await t.factories.org();
  other = await t.factories.org();
  aliceId = await t.factories.member(org.orgId);
  bobId = await t.factories.member(org.orgId);
  carolId = await t.factories.member(org.orgId);
  const credential = async (userId: string) => ({ token: await t.factories.token(org.orgId, userId), org: org.orgId });
  const aliceCred = await credential(aliceId);
  const bobCred = await credential(bobId);
  owner = t.as({ token: org.token, org: org.orgId });
  alice = t.as(aliceCred);
  bob = t.as(bobCred);
  carol = t.as(await credential(carolId));
  crm = await connector('crm', ['lookup', 'update', 'fail', 'whoami', 'echo']);
  discovered = await connector('discovered', []);
  aliceConn = await connect(aliceCred, crm, KEY_A);
  bobConn = await connect(bobCred, crm, KEY_B);
});
afterAll(() => t.close());

describe('saving', () => {
  it('creates, reads, lists, updates and deletes, with audit entries', async () => {
    const res = await owner.op('createSyntheticTool', {
      body: {
        name: 'triage',
        description: 'One step.',
        input_schema: { type: 'object', properties: { ticket_id: { type: 'integer' } } },
        steps: [{ id: 'lookup', tool: { connector_slug: crm, name: 'lookup' }, arguments: { id: { $input: '/ticket_id' } } }],
      },
    });
    expect(res.status).toBe(201);
    const tool = res.body;
    expect(res.headers.get('location')).toBe(`/synthetic-tool/${tool.id}`);
    expect(tool).toMatchObject({
      name: 'triage',
      output_schema: null,
      output: { $step: 'lookup' },
      connector_slugs: [crm],
      created_by_user_id: org.ownerId,
      steps: [
        { id: 'lookup', tool: { connector_slug: crm, connection_id: null, name: 'lookup' }, arguments: { id: { $input: '/ticket_id' } }, on_error: 'fail' },
      ],
    });
    expect((await owner.op('getSyntheticTool', { params: { id: tool.id } })).body).toEqual(tool);
    expect((await alice.op('getSyntheticTool', { params: { id: tool.id } })).status).toBe(200);

    const byConnector = await owner.op('listSyntheticTools', { query: { connector_slug: crm, limit: 100 } });
    expect(byConnector.body.data.map((s: { id: string }) => s.id)).toContain(tool.id);
    expect((await owner.op('listSyntheticTools', { query: { connector_slug: 'docs-demo' } })).body.data.map((s: { id: string }) => s.id)).not.toContain(
      tool.id,
    );
    expect((await owner.op('listSyntheticTools', { query: { created_by_user_id: aliceId } })).body.data).toEqual([]);
    expectError(await owner.op('listSyntheticTools', { query: { connector_slug: 'no-such-connector' } }), 400, 'unknown_reference');
    // Pages, oldest first.
    await created(lookupThenUpdate('paged_second'));
    const first = await owner.op('listSyntheticTools', { query: { limit: 1 } });
    expect(first.body.data.map((s: { id: string }) => s.id)).toEqual([tool.id]);
    const next = await owner.op('listSyntheticTools', { query: { limit: 1, cursor: first.body.next_cursor ?? undefined } });
    expect(next.body.data[0]?.name).toBe('paged_second');
    expectError(await owner.op('listSyntheticTools', { query: { cursor: 'bm90LWFuLWlk' } }), 400, 'invalid_cursor');
    expectError(await owner.op('listSyntheticTools', { query: { created_by_user_id: 'usr_01jg3b7f0m5x2c8v4n6b9t1r3e' } }), 400, 'unknown_reference');

    const renamed = await owner.op('updateSyntheticTool', {
      params: { id: tool.id },
      body: { name: 'triage_v2', description: 'Reworded.', output_schema: { type: 'object' } },
    });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({ name: 'triage_v2', description: 'Reworded.', output_schema: { type: 'object' }, steps: tool.steps });
    expect((await owner.op('updateSyntheticTool', { params: { id: tool.id }, body: { output_schema: null } })).body.output_schema).toBeNull();
    // Steps replaced wholesale; the kept output must still name an existing step.
    const replaced = await owner.op('updateSyntheticTool', {
      params: { id: tool.id },
      body: { steps: [{ id: 'who', tool: { connector_slug: crm, name: 'whoami' } }] },
    });
    expectError(replaced, 400, 'validation_failed');
    expect(replaced.error?.errors).toEqual([{ in: 'body', pointer: '/output/$step', message: 'refers to step "lookup", which is not a step of this tool' }]);
    const both = await owner.op('updateSyntheticTool', {
      params: { id: tool.id },
      body: {
        steps: [{ id: 'who', tool: { connector_slug: crm, name: 'whoami' } }],
        output: { $step: 'who', pointer: '/member' },
      },
    });
    expect(both.status).toBe(200);
    expect(both.body.steps[0]?.id).toBe('who');

    await created(lookupThenUpdate('name_in_use'));
    expectError(await owner.op('updateSyntheticTool', { params: { id: tool.id }, body: { name: 'name_in_use' } }), 409, 'name_taken');
    expectError(await owner.op('createSyntheticTool', { body: lookupThenUpdate('name_in_use') }), 409, 'name_taken');

    expect((await owner.op('deleteSyntheticTool', { params: { id: tool.id } })).status).toBe(204);
    expectError(await owner.op('getSyntheticTool', { params: { id: tool.id } }), 404, 'not_found');
    expectError(await owner.op('deleteSyntheticTool', { params: { id: tool.id } }), 404, 'not_found');
    const actions = (await t.factories.auditEntries(org.orgId)).filter((e) => e.target_id === tool.id).map((e) => e.action);
    expect(actions).toEqual(expect.arrayContaining(['synthetic_tool.created', 'synthetic_tool.updated', 'synthetic_tool.deleted']));
    const update = (await t.factories.auditEntries(org.orgId, 'synthetic_tool.updated')).find((e) => e.target_id === tool.id);
    expect(update?.changes).toEqual({
      name: { from: 'triage', to: 'triage_v2' },
      description: { from: 'One step.', to: 'Reworded.' },
      output_schema: { from: null, to: auditDigest({ type: 'object' }) },
    });
  });

  it('records an update in the audit log as {from, to} per changed member, the steps by digest', async () => {
    const tool = await created(lookupThenUpdate('audited_update'));
    const steps = [{ id: 'who', tool: { connector_slug: crm, name: 'whoami' } }];
    const res = await owner.op('updateSyntheticTool', {
      params: { id: tool.id },
      body: { name: 'audited_update_v2', steps, output: { $step: 'who', pointer: '/member' } },
    });
    expect(res.status).toBe(200);
    const entries = (await t.factories.auditEntries(org.orgId, 'synthetic_tool.updated')).filter((e) => e.target_id === tool.id);
    expect(entries.map((e) => e.changes)).toEqual([
      {
        name: { from: 'audited_update', to: 'audited_update_v2' },
        steps: { from: auditDigest(tool.steps), to: auditDigest(res.body.steps) },
        output: { from: auditDigest(tool.output), to: auditDigest({ $step: 'who', pointer: '/member' }) },
      },
    ]);
    expect(auditDigest(tool.steps)).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('names every bad reference by its pointer', async () => {
    const base = lookupThenUpdate('bad_refs');
    const step = (over: Partial<Schemas['SyntheticToolStepInput']>, i = 0) => ({ ...base, steps: base.steps.map((s, j) => (j === i ? { ...s, ...over } : s)) });

    const unknownConnector = await owner.op('createSyntheticTool', { body: step({ tool: { connector_slug: 'nowhere', name: 'lookup' } }) });
    expectError(unknownConnector, 400, 'unknown_reference');
    expect(unknownConnector.error?.errors).toEqual([{ in: 'body', pointer: '/steps/0/tool/connector_slug', message: expect.any(String) }]);

    const undeclared = await owner.op('createSyntheticTool', { body: step({ tool: { connector_slug: crm, name: 'drop_tables' } }, 1) });
    expectError(undeclared, 400, 'validation_failed');
    expect(undeclared.error?.errors).toEqual([{ in: 'body', pointer: '/steps/1/tool/name', message: `is not a tool of ${crm}` }]);

    const forward = await owner.op('createSyntheticTool', { body: step({ arguments: { id: { $step: 'update', pointer: '/id' } } }) });
    expectError(forward, 400, 'validation_failed');
    expect(forward.error?.errors).toEqual([
      { in: 'body', pointer: '/steps/0/arguments/id/$step', message: 'refers to step "update", which is not an earlier step' },
    ]);
    const itself = await owner.op('createSyntheticTool', { body: step({ arguments: { note: { $template: 'see {{step:lookup:/x}}' } } }) });
    expect(itself.error?.errors).toEqual([
      { in: 'body', pointer: '/steps/0/arguments/note/$template', message: 'refers to step "lookup", which is not an earlier step' },
    ]);

    const duplicate = await owner.op('createSyntheticTool', { body: step({ id: 'lookup' }, 1) });
    expect(duplicate.error?.errors).toContainEqual({ in: 'body', pointer: '/steps/1/id', message: 'repeats the id "lookup" of an earlier step' });

    const notObject = await owner.op('createSyntheticTool', { body: { ...base, input_schema: { type: 'object', properties: { a: { type: 'strin' } } } } });
    expectError(notObject, 400, 'validation_failed');
    expect(notObject.error?.errors[0]?.pointer).toMatch(/^\/input_schema/);
    const draft7 = await owner.op('createSyntheticTool', {
      body: { ...base, input_schema: { type: 'object', $schema: 'http://json-schema.org/draft-07/schema#' } },
    });
    expect(draft7.error?.errors).toEqual([{ in: 'body', pointer: '/input_schema/$schema', message: expect.stringMatching(/draft 2020-12/) }]);
    const badOutputSchema = await owner.op('createSyntheticTool', { body: { ...base, output_schema: { type: 'object', required: 'x' } as never } });
    expect(badOutputSchema.error?.errors[0]?.pointer).toMatch(/^\/output_schema/);
    const unresolvable = await owner.op('createSyntheticTool', {
      body: { ...base, input_schema: { type: 'object', properties: { a: { $ref: 'https://schemas.example/a.json' } } } },
    });
    expect(unresolvable.error?.errors).toEqual([{ in: 'body', pointer: '/input_schema', message: expect.stringMatching(/does not compile/) }]);

    const nested = await owner.op('createSyntheticTool', {
      body: { ...base, output: { a: [{ b: { $eval: 'process.exit()' } }], c: { $template: '{{constructor}}' } } },
    });
    expect(nested.error?.errors).toEqual([
      { in: 'body', pointer: '/output/a/0/b/$eval', message: expect.stringMatching(/starts with "\$"/) },
      { in: 'body', pointer: '/output/c/$template', message: expect.stringMatching(/is not a placeholder/) },
    ]);
    const unknownOutputStep = await owner.op('createSyntheticTool', { body: { ...base, output: { $step: 'nope' } } });
    expect(unknownOutputStep.error?.errors).toEqual([
      { in: 'body', pointer: '/output/$step', message: 'refers to step "nope", which is not a step of this tool' },
    ]);
    expect((await owner.op('listSyntheticTools', { query: { limit: 100 } })).body.data.map((s: { name: string }) => s.name)).not.toContain('bad_refs');
  });

  it("pins only connections the writer may pin: their own, or anyone's with connection:manage", async () => {
    const pinned = (conn: string, slug = crm): Schemas['SyntheticToolCreate'] => ({
      name: `pin_${conn.slice(-6)}_${slug}`,
      description: 'Pinned.',
      input_schema: { type: 'object' },
      steps: [{ id: 'who', tool: { connector_slug: slug, connection_id: conn, name: 'whoami' } }],
    });
    // The owner holds connection:manage: Alice's connection may be pinned.
    expect((await owner.op('createSyntheticTool', { body: pinned(aliceConn) })).status).toBe(201);
    // Without connection:manage (a token that leaves it out) only one's own.
    const narrow = t.as({
      token: await t.factories.token(
        org.orgId,
        org.ownerId,
        PERMISSIONS.filter((p) => p !== 'connection:manage'),
      ),
      org: org.orgId,
    });
    const refused = await narrow.op('createSyntheticTool', { body: pinned(bobConn) });
    expectError(refused, 400, 'unknown_reference');
    expect(refused.error?.errors).toEqual([{ in: 'body', pointer: '/steps/0/tool/connection_id', message: expect.any(String) }]);
    expectError(await owner.op('createSyntheticTool', { body: pinned('conn_01jg3c9q1s3v5x7z9b1d3f5h7k') }), 400, 'unknown_reference');
    // A connection of another connector.
    const wrong = await owner.op('createSyntheticTool', {
      body: {
        ...pinned(aliceConn),
        name: 'pin_wrong',
        steps: [{ id: 'who', tool: { connector_slug: discovered, connection_id: aliceConn, name: 'whoami' } }],
      },
    });
    expectError(wrong, 400, 'validation_failed');
    expect(wrong.error?.errors[0]?.pointer).toBe('/steps/0/tool/connection_id');
  });

  it('a connector that declares no tools is checked against what its connections listed, once any did', async () => {
    const body = (name: string, tool: string): Schemas['SyntheticToolCreate'] => ({
      name,
      description: 'Discovered.',
      input_schema: { type: 'object' },
      steps: [{ id: 'one', tool: { connector_slug: discovered, name: tool } }],
    });
    // Nothing listed yet: any name is accepted; the upstream decides at run time.
    expect((await owner.op('createSyntheticTool', { body: body('disc_before', 'anything_at_all') })).status).toBe(201);
    await connect({ token: await t.factories.token(org.orgId, carolId), org: org.orgId }, discovered, KEY_A);
    expect((await owner.op('createSyntheticTool', { body: body('disc_known', 'lookup') })).status).toBe(201);
    const unknown = await owner.op('createSyntheticTool', { body: body('disc_unknown', 'anything_at_all') });
    expectError(unknown, 400, 'validation_failed');
    expect(unknown.error?.errors[0]).toMatchObject({ pointer: '/steps/0/tool/name', message: expect.stringMatching(/as its connections last listed them/) });
    // The name accepted before any listing: the upstream refuses it when it runs, an answer naming the step.
    const before = (await owner.op('listSyntheticTools', { query: { connector_slug: discovered } })).body.data.find(
      (s: { name: string }) => s.name === 'disc_before',
    );
    const run = await carol.op('executeSyntheticTool', { params: { id: before!.id }, body: {} });
    expect(run.status).toBe(200);
    expect(run.body).toMatchObject({
      is_error: true,
      error: { step_id: 'one', message: expect.stringMatching(/^Step one: The upstream refused the call: .*anything_at_all/) },
    });
    expect(run.body.steps[0]).toMatchObject({ status: 'failed', tool: { connector_slug: discovered, name: 'anything_at_all' } });
  });

  it("is another organization's 404", async () => {
    const tool = await created(lookupThenUpdate('isolated'));
    const stranger = t.as({ token: other.token, org: other.orgId });
    expectError(await stranger.op('getSyntheticTool', { params: { id: tool.id } }), 404, 'not_found');
    expectError(await stranger.op('updateSyntheticTool', { params: { id: tool.id }, body: { description: 'x' } }), 404, 'not_found');
    expectError(await stranger.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1 } } }), 404, 'not_found');
    expectError(await stranger.op('deleteSyntheticTool', { params: { id: tool.id } }), 404, 'not_found');
    expect((await stranger.op('listSyntheticTools')).body.data).toEqual([]);
  });
});

describe('executing', () => {
  let tool: Schemas['SyntheticTool'];
  beforeAll(async () => {
    tool = await created(lookupThenUpdate('close_ticket'));
  });

  it("maps across steps, each run through the caller's own connection and key", async () => {
    const mark = up.peer.seen.length;
    const res = await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 4821 } } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      synthetic_tool_id: tool.id,
      is_error: false,
      error: null,
      result: {
        ticket: { id: 4821, subject: 'Ticket 4821', status: 'open', member: 'alice', credential: KEY_A },
        updated: { updated: 4821, status: 'closed', note: 'was open (none given) {{literal}}', by: 'alice' },
        who: ['alice', 'alice'],
      },
    });
    expect(JSON.parse((res.body.content[0] as { text: string }).text)).toEqual(res.body.result);
    expect(res.body.steps).toEqual([
      {
        id: 'lookup',
        tool: { connector_slug: crm, connection_id: aliceConn, name: 'lookup' },
        status: 'succeeded',
        started_at: expect.any(String),
        duration_ms: expect.any(Number),
        error: null,
      },
      {
        id: 'update',
        tool: { connector_slug: crm, connection_id: aliceConn, name: 'update' },
        status: 'succeeded',
        started_at: expect.any(String),
        duration_ms: expect.any(Number),
        error: null,
      },
    ]);
    const calls = seenSince(mark);
    expect(calls).toHaveLength(2);
    expect(calls.every((c) => c.credential === KEY_A)).toBe(true);
    expect(res.text).not.toContain(org.token);

    const mark2 = up.peer.seen.length;
    const asBob = await bob.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 7, note: 'urgent' } } });
    expect(asBob.body.result).toMatchObject({ ticket: { member: 'bob', credential: KEY_B }, updated: { note: 'was open (urgent) {{literal}}', by: 'bob' } });
    expect(asBob.body.steps[0]?.tool.connection_id).toBe(bobConn);
    expect(seenSince(mark2).map((c) => c.credential)).toEqual([KEY_B, KEY_B]);
    // Nobody else's key travelled with either run.
    expect(up.peer.seen.slice(mark).every((s) => s.credential !== null && [KEY_A, KEY_B].includes(s.credential))).toBe(true);

    // Steps go through the connection's kept upstream session: another run opens none.
    const mark3 = up.peer.seen.length;
    expect((await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 5 } } })).status).toBe(200);
    expect(seenSince(mark3)).toHaveLength(2);
    expect(up.peer.seen.slice(mark3).filter((s) => s.rpc === 'initialize')).toHaveLength(0);
  });

  it("runs the same outside a request (the MCP endpoint's way in): runSyntheticTool with the app's deps", async () => {
    const row = await findSyntheticTool(t.db, org.orgId, tool.id);
    const run = await runSyntheticTool(t.deps, org.orgId, bobId, row!, { ticket_id: 11 }, new AbortController().signal);
    expect(run).toMatchObject({ is_error: false, result: { ticket: { id: 11, member: 'bob' }, updated: { note: 'was open (none given) {{literal}}' } } });
    await expect(runSyntheticTool(t.deps, org.orgId, bobId, row!, {}, new AbortController().signal)).rejects.toMatchObject({ code: 'invalid_tool_arguments' });
  });

  it('checks the arguments against input_schema before anything runs', async () => {
    const mark = up.peer.seen.length;
    const res = await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { note: 5, extra: true } } });
    expectError(res, 400, 'invalid_tool_arguments');
    expect(res.error?.errors).toEqual(
      expect.arrayContaining([
        { in: 'body', pointer: '/arguments/ticket_id', message: expect.any(String) },
        { in: 'body', pointer: '/arguments/note', message: 'must be string' },
      ]),
    );
    expect(up.peer.seen.length).toBe(mark);
  });

  it('checks patterns in time linear in the argument (no backtracking to hold the server), and refuses ones RE2 cannot run', async () => {
    const nested = await created(
      lookupThenUpdate('pattern_check', {
        input_schema: { ...ticketInput, properties: { ...ticketInput.properties, note: { type: 'string', pattern: '^(a+)+$' } } },
      }),
    );
    // 40 a's and a "!": a backtracking engine tries 2^40 ways before it says no.
    const started = Date.now();
    const refused = await alice.op('executeSyntheticTool', { params: { id: nested.id }, body: { arguments: { ticket_id: 1, note: `${'a'.repeat(40)}!` } } });
    expectError(refused, 400, 'invalid_tool_arguments');
    expect(refused.error?.errors).toEqual([{ in: 'body', pointer: '/arguments/note', message: 'must match pattern "^(a+)+$"' }]);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await alice.op('executeSyntheticTool', { params: { id: nested.id }, body: { arguments: { ticket_id: 1, note: 'aaaa' } } })).status).toBe(200);

    const lookahead = await owner.op('createSyntheticTool', {
      body: lookupThenUpdate('lookahead', {
        input_schema: { ...ticketInput, properties: { ...ticketInput.properties, note: { type: 'string', pattern: '^(?=a)' } } },
      }),
    });
    expectError(lookahead, 400, 'validation_failed');
    expect(JSON.stringify(lookahead.error?.errors)).toContain('does not compile');
  });

  it('refuses arguments over 256 KiB of JSON with 413 payload_too_large, before anything runs', async () => {
    const mark = up.peer.seen.length;
    const res = await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1, note: 'x'.repeat(300_000) } } });
    expectError(res, 413, 'payload_too_large');
    expect(res.error?.detail).toContain('262144');
    expect(up.peer.seen.length).toBe(mark);
  });

  it('bounds the pattern work of one check: a heavy pattern on a long argument is refused, not matched', async () => {
    // 553 RE2 instructions: on 20,000 characters, twice the work a check may do.
    const heavy = await created(
      lookupThenUpdate('heavy_pattern', {
        input_schema: { ...ticketInput, properties: { ...ticketInput.properties, note: { type: 'string', pattern: '(a|aa|aaa|b|c|d|e|f){50}$' } } },
      }),
    );
    const mark = up.peer.seen.length;
    const refused = await alice.op('executeSyntheticTool', { params: { id: heavy.id }, body: { arguments: { ticket_id: 1, note: 'a'.repeat(20_000) } } });
    expectError(refused, 400, 'invalid_tool_arguments');
    expect(refused.error?.errors).toEqual([{ in: 'body', pointer: '/arguments', message: 'needs more pattern matching than a call may use' }]);
    expect(up.peer.seen.length).toBe(mark);
    // The same pattern on a value of ordinary length is checked, and the server goes on answering.
    expect((await alice.op('executeSyntheticTool', { params: { id: heavy.id }, body: { arguments: { ticket_id: 1, note: 'a'.repeat(60) } } })).status).toBe(
      200,
    );
  });

  it('checks uniqueItems over a long array of objects, and names a duplicate', async () => {
    const unique = await created(
      lookupThenUpdate('unique_tags', {
        input_schema: { ...ticketInput, properties: { ...ticketInput.properties, tags: { type: 'array', uniqueItems: true } } },
      }),
    );
    const tags = Array.from({ length: 10_000 }, (_, i) => ({ t: i }));
    expect((await alice.op('executeSyntheticTool', { params: { id: unique.id }, body: { arguments: { ticket_id: 1, tags } } })).status).toBe(200);
    const dup = await alice.op('executeSyntheticTool', { params: { id: unique.id }, body: { arguments: { ticket_id: 1, tags: [...tags, { t: 7 }] } } });
    expectError(dup, 400, 'invalid_tool_arguments');
    expect(dup.error?.errors).toEqual([
      { in: 'body', pointer: '/arguments/tags', message: 'must NOT have duplicate items (items ## 7 and 10000 are identical)' },
    ]);
  });

  it('stops a mapping at 4 MiB of JSON: an output or a step’s arguments that would copy more fail the run, and the server answers the next call', async () => {
    const bigInput = { type: 'object' as const, properties: { big: { type: 'string' } }, required: ['big'] };
    const big = 'x'.repeat(200_000);
    // 30 copies of a 200,000-character argument: 6 MB of output from a request of 200 KB.
    const output = await created({
      name: 'amplify_output',
      description: 'Copies its argument many times into the output.',
      input_schema: bigInput,
      steps: [{ id: 'lookup', tool: { connector_slug: crm, name: 'lookup' }, arguments: { id: 1 } }],
      output: { copies: Array.from({ length: 30 }, () => ({ $input: '/big' })) },
    });
    const refused = await alice.op('executeSyntheticTool', { params: { id: output.id }, body: { arguments: { big } } });
    expect(refused.status).toBe(200);
    expect(refused.body).toMatchObject({ is_error: true, result: null, error: { step_id: null, message: expect.stringContaining('4 MiB') } });
    expect(refused.text.length).toBeLessThan(100_000);

    const args = await created({
      name: 'amplify_arguments',
      description: 'Copies its argument many times into a step’s arguments.',
      input_schema: bigInput,
      steps: [{ id: 'update', tool: { connector_slug: crm, name: 'update' }, arguments: { id: 1, note: { $template: '{{input:/big}}'.repeat(30) } } }],
    });
    const mark = up.peer.seen.length;
    const stopped = await alice.op('executeSyntheticTool', { params: { id: args.id }, body: { arguments: { big } } });
    expect(stopped.body).toMatchObject({ is_error: true, error: { step_id: 'update', message: expect.stringContaining('4 MiB') } });
    expect(stopped.body.steps[0]?.status).toBe('failed');
    expect(seenSince(mark)).toHaveLength(0);

    // Within the budget the same tools run.
    expect((await alice.op('executeSyntheticTool', { params: { id: output.id }, body: { arguments: { big: 'small' } } })).body.result).toEqual({
      copies: Array.from({ length: 30 }, () => 'small'),
    });
  });

  it('refuses a schema whose $refs expand past 20,000 subschemas when saved, and will not check one stored before the limit', async () => {
    /** Each definition uses the previous one twice: 2^depth subschemas walked per check, from a schema of a couple of kilobytes. */
    const doubling = (depth: number) => {
      const defs: Record<string, unknown> = { d0: { type: 'object' } };
      for (let i = 1; i <= depth; i += 1) defs[`d${i}`] = { allOf: [{ $ref: `#/$defs/d${i - 1}` }, { $ref: `#/$defs/d${i - 1}` }] };
      return { ...ticketInput, $defs: defs, allOf: [{ $ref: `#/$defs/d${depth}` }] };
    };
    const refused = await owner.op('createSyntheticTool', { body: lookupThenUpdate('doubling_refs', { input_schema: doubling(28) }) });
    expectError(refused, 400, 'validation_failed');
    expect(refused.error?.errors).toEqual([
      { in: 'body', pointer: '/input_schema', message: expect.stringContaining('expands to more than 20000 subschemas') },
    ]);

    // A recursive schema (a tree) expands once: its cost grows with the value, not the schema.
    const tree = {
      ...ticketInput,
      properties: { ...ticketInput.properties, node: { $ref: '#/$defs/node' } },
      $defs: { node: { type: 'object', properties: { name: { type: 'string' }, children: { type: 'array', items: { $ref: '#/$defs/node' } } } } },
    };
    const recursive = await created(lookupThenUpdate('tree_refs', { input_schema: tree }));
    const node = { name: 'a', children: [{ name: 'b', children: [{ name: 'c', children: [] }] }] };
    expect((await alice.op('executeSyntheticTool', { params: { id: recursive.id }, body: { arguments: { ticket_id: 1, node } } })).status).toBe(200);

    // One saved before the limit: no run checks against it, until its author updates it.
    const old = await created(lookupThenUpdate('stored_doubling'));
    await t.db
      .updateTable('synthetic_tools')
      .set({ input_schema: JSON.stringify(doubling(24)), updated_at: new Date() })
      .where('id', '=', old.id)
      .execute();
    const mark = up.peer.seen.length;
    const stale = await alice.op('executeSyntheticTool', { params: { id: old.id }, body: { arguments: { ticket_id: 1 } } });
    expectError(stale, 409, 'conflict');
    expect(stale.error?.detail).toContain(`PATCH /synthetic-tool/${old.id}`);
    expect(up.peer.seen.length).toBe(mark);
  });

  it('stops at the first failing step and names it; under continue the run goes on with defaults', async () => {
    const failing = await created({
      name: 'fails_first',
      description: 'Fails.',
      input_schema: ticketInput,
      steps: [
        { id: 'find', tool: { connector_slug: crm, name: 'fail' }, arguments: { id: { $input: '/ticket_id' } } },
        { id: 'after', tool: { connector_slug: crm, name: 'lookup' }, arguments: { id: 1 } },
      ],
    });
    const res = await alice.op('executeSyntheticTool', { params: { id: failing.id }, body: { arguments: { ticket_id: 9 } } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      is_error: true,
      result: null,
      error: { step_id: 'find', message: 'Step find: ticket 9 not found' },
      content: [{ type: 'text', text: 'Step find: ticket 9 not found' }],
    });
    expect(res.body.steps.map((s: { status: string }) => s.status)).toEqual(['failed', 'skipped']);
    expect(res.body.steps[0]?.error).toBe('ticket 9 not found');
    expect(res.body.steps[1]).toMatchObject({ started_at: null, duration_ms: null, error: null, tool: { connection_id: aliceConn } });

    const tolerant = await created({
      name: 'fails_tolerated',
      description: 'Fails, goes on.',
      input_schema: ticketInput,
      steps: [
        { id: 'find', tool: { connector_slug: crm, name: 'fail' }, arguments: { id: { $input: '/ticket_id' } }, on_error: 'continue' },
        { id: 'after', tool: { connector_slug: crm, name: 'lookup' }, arguments: { id: { $step: 'find', pointer: '/id', default: 77 } } },
      ],
      output: { found: { $step: 'find', default: 'nothing' }, after: { $step: 'after', pointer: '/id' } },
    });
    const ok = await alice.op('executeSyntheticTool', { params: { id: tolerant.id }, body: { arguments: { ticket_id: 9 } } });
    expect(ok.body).toMatchObject({ is_error: false, result: { found: 'nothing', after: 77 } });
    expect(ok.body.steps.map((s: { status: string }) => s.status)).toEqual(['failed', 'succeeded']);

    // A later step whose arguments refer, without a default, to a step that failed under continue: it fails uncalled.
    const uncalled = await created({
      ...lookupThenUpdate('uncalled'),
      steps: [
        tolerant.steps[0] as Schemas['SyntheticToolStepInput'],
        { id: 'needs', tool: { connector_slug: crm, name: 'lookup' }, arguments: { id: { $step: 'find', pointer: '/id' } } },
      ],
      output: { $literal: null },
    });
    const mark = up.peer.seen.length;
    const stopped = await alice.op('executeSyntheticTool', { params: { id: uncalled.id }, body: { arguments: { ticket_id: 9 } } });
    expect(stopped.body).toMatchObject({
      is_error: true,
      error: { step_id: 'needs', message: expect.stringMatching(/^Step needs: Cannot resolve .*"find".* no default/) },
    });
    expect(stopped.body.steps.map((s: { status: string }) => s.status)).toEqual(['failed', 'failed']);
    expect(seenSince(mark)).toHaveLength(1);

    // A step reference without a default to a failed step ends the run, naming the output.
    const noDefault = await created({
      ...lookupThenUpdate('no_default'),
      steps: [tolerant.steps[0] as Schemas['SyntheticToolStepInput']],
      output: { $step: 'find' },
    });
    const ended = await alice.op('executeSyntheticTool', { params: { id: noDefault.id }, body: { arguments: { ticket_id: 9 } } });
    expect(ended.body).toMatchObject({ is_error: true, error: { step_id: null, message: expect.stringMatching(/^Output: .*step "find" has no result/) } });

    // An output that does not match output_schema is an error too.
    const mismatch = await created({ ...lookupThenUpdate('schema_mismatch'), output_schema: { type: 'object', required: ['missing'] } });
    const bad = await alice.op('executeSyntheticTool', { params: { id: mismatch.id }, body: { arguments: { ticket_id: 1 } } });
    expect(bad.body).toMatchObject({ is_error: true, error: { step_id: null, message: expect.stringMatching(/does not match output_schema/) } });
  });

  it('gives each step at most the step timeout: 502 under fail, a failed step under continue', async () => {
    const slow = await created({
      name: 'slow_steps',
      description: 'Slow.',
      input_schema: { type: 'object' },
      steps: [
        { id: 'maybe', tool: { connector_slug: crm, name: 'whoami' }, on_error: 'continue' },
        { id: 'must', tool: { connector_slug: crm, name: 'whoami' } },
      ],
      output: { a: { $step: 'maybe', default: null } },
    });
    up.peer.delayMs = STEP_TIMEOUT_MS + 500;
    try {
      const started = Date.now();
      const res = await alice.op('executeSyntheticTool', { params: { id: slow.id }, body: {} });
      expectError(res, 502, 'upstream_unavailable');
      expect(res.error?.detail).toMatch(/^Step must \(crm whoami\): Connector crm did not answer within 1000 ms\./);
      expect(Date.now() - started).toBeLessThan(STEP_TIMEOUT_MS * 2 + 1500);
    } finally {
      up.peer.delayMs = 0;
    }
    const runs = await alice.op('executeSyntheticTool', { params: { id: slow.id }, body: {} });
    expect(runs.body.is_error).toBe(false);
    // Under continue, the step that timed out is a failed step of an answer.
    const tolerant = await created({
      name: 'slow_tolerated',
      description: 'Slow, tolerated.',
      input_schema: { type: 'object' },
      steps: [slow.steps[0] as Schemas['SyntheticToolStepInput']],
      output: { a: { $step: 'maybe', default: 'late' } },
    });
    up.peer.delayMs = STEP_TIMEOUT_MS + 500;
    try {
      const res = await alice.op('executeSyntheticTool', { params: { id: tolerant.id }, body: {} });
      expect(res.body).toMatchObject({ is_error: false, result: { a: 'late' } });
      expect(res.body.steps[0]).toMatchObject({ status: 'failed', error: 'Connector crm did not answer within 1000 ms.' });
      expect(res.body.steps[0]!.duration_ms).toBeGreaterThanOrEqual(STEP_TIMEOUT_MS - 50);
    } finally {
      up.peer.delayMs = 0;
    }
  });

  it('runs a pinned step through the pinned connection, for whoever may reach it', async () => {
    const pinned = await created({
      name: 'pinned_lookup',
      description: "Through Alice's connection.",
      input_schema: ticketInput,
      steps: [
        { id: 'lookup', tool: { connector_slug: crm, connection_id: aliceConn, name: 'lookup' }, arguments: { id: { $input: '/ticket_id' } } },
        { id: 'mine', tool: { connector_slug: crm, name: 'whoami' } },
      ],
      output: { pinned: { $step: 'lookup', pointer: '/member' }, own: { $step: 'mine', pointer: '/member' } },
    });
    const asAlice = await alice.op('executeSyntheticTool', { params: { id: pinned.id }, body: { arguments: { ticket_id: 1 } } });
    expect(asAlice.body.result).toEqual({ pinned: 'alice', own: 'alice' });
    // Bob neither owns it nor reaches it through a toolbox.
    const refused = await bob.op('executeSyntheticTool', { params: { id: pinned.id }, body: { arguments: { ticket_id: 1 } } });
    expectError(refused, 409, 'connection_unavailable');
    expect(refused.error?.detail).toContain(aliceConn);
    // A toolbox shared with the organization lists Alice's connection: now Bob reaches it.
    const toolboxId = newId('toolbox');
    await t.db.insertInto('toolboxes').values({ id: toolboxId, org_id: org.orgId, name: 'Shared CRM', created_by_user_id: org.ownerId }).execute();
    await t.db
      .insertInto('toolbox_entries')
      .values({ toolbox_id: toolboxId, position: 0, type: 'connection', connection_id: aliceConn, tools: JSON.stringify('all') })
      .execute();
    await shareResource(t.db, {
      orgId: org.orgId,
      resourceType: 'toolbox',
      resourceId: toolboxId,
      share: { principal: { type: 'organization', id: org.orgId }, level: 'use' },
      byUserId: null,
    });
    const mark = up.peer.seen.length;
    const asBob = await bob.op('executeSyntheticTool', { params: { id: pinned.id }, body: { arguments: { ticket_id: 1 } } });
    expect(asBob.status).toBe(200);
    expect(asBob.body.result).toEqual({ pinned: 'alice', own: 'bob' });
    expect(asBob.body.steps.map((s) => s.tool.connection_id)).toEqual([aliceConn, bobConn]);
    expect(seenSince(mark).map((c) => c.credential)).toEqual([KEY_A, KEY_B]);
  });

  it("calls through someone else's pinned connection only the tools its toolbox entries shared with the caller select", async () => {
    // A toolbox shared with Carol alone offers Bob's connection for lookup only.
    const toolboxId = newId('toolbox');
    await t.db.insertInto('toolboxes').values({ id: toolboxId, org_id: org.orgId, name: 'Bob CRM lookups', created_by_user_id: org.ownerId }).execute();
    await t.db
      .insertInto('toolbox_entries')
      .values({ toolbox_id: toolboxId, position: 0, type: 'connection', connection_id: bobConn, tools: JSON.stringify(['lookup']) })
      .execute();
    await shareResource(t.db, {
      orgId: org.orgId,
      resourceType: 'toolbox',
      resourceId: toolboxId,
      share: { principal: { type: 'user', id: carolId }, level: 'use' },
      byUserId: null,
    });
    const pinnedStep = (name: string) => ({
      name: `bob_${name}`,
      description: `${name} through Bob's connection.`,
      input_schema: ticketInput,
      steps: [
        {
          id: 'call',
          tool: { connector_slug: crm, connection_id: bobConn, name },
          arguments: { id: { $input: '/ticket_id' }, status: { $literal: 'deleted' } },
        },
      ],
    });
    const lookup = await created(pinnedStep('lookup'));
    const update = await created(pinnedStep('update'));

    const mark = up.peer.seen.length;
    const refused = await carol.op('executeSyntheticTool', { params: { id: update.id }, body: { arguments: { ticket_id: 9 } } });
    expectError(refused, 409, 'connection_unavailable');
    expect(refused.error?.detail).toContain('offer only lookup');
    // Bob's key never went upstream for a tool he did not offer.
    expect(seenSince(mark)).toHaveLength(0);

    const allowed = await carol.op('executeSyntheticTool', { params: { id: lookup.id }, body: { arguments: { ticket_id: 9 } } });
    expect(allowed.status).toBe(200);
    expect(allowed.body.result).toMatchObject({ id: 9, member: 'bob', credential: KEY_B });
    // Bob runs both through his own connection, whatever the toolboxes say.
    expect((await bob.op('executeSyntheticTool', { params: { id: update.id }, body: { arguments: { ticket_id: 9 } } })).status).toBe(200);
  });

  it('leaves the tool-call records a run over MCP leaves: the synthetic tool’s and one per step called, refusals included', async () => {
    const res = await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 31 } } });
    expect(res.status).toBe(200);
    const refused = await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { note: 'no ticket' } } });
    expectError(refused, 400, 'invalid_tool_arguments');
    await t.deps.mcp.toolCalls.flush();
    const recordsOf = (requestId: string | null | undefined) =>
      t.db
        .selectFrom('tool_call_records')
        .select([
          'org_id',
          'mcp_server_id',
          'user_id',
          'user_toolbox_id',
          'connection_id',
          'connector_slug',
          'synthetic_tool_id',
          'tool_name',
          'upstream_tool',
          'outcome',
          'error',
          'jsonrpc_id',
        ])
        .where('request_id', '=', requestId ?? '')
        .orderBy('id')
        .execute();
    const common = {
      org_id: org.orgId,
      mcp_server_id: null,
      user_id: aliceId,
      user_toolbox_id: null,
      synthetic_tool_id: tool.id,
      tool_name: tool.name,
      jsonrpc_id: null,
    };
    const ran = await recordsOf(res.headers.get('x-request-id'));
    expect(ran).toEqual(
      expect.arrayContaining([
        { ...common, connection_id: aliceConn, connector_slug: crm, upstream_tool: 'lookup', outcome: 'succeeded', error: null },
        { ...common, connection_id: aliceConn, connector_slug: crm, upstream_tool: 'update', outcome: 'succeeded', error: null },
        { ...common, connection_id: null, connector_slug: null, upstream_tool: null, outcome: 'succeeded', error: null },
      ]),
    );
    expect(ran).toHaveLength(3);
    expect(await recordsOf(refused.error?.request_id)).toEqual([
      { ...common, connection_id: null, connector_slug: null, upstream_tool: null, outcome: 'tool_error', error: refused.error?.detail },
    ]);
  });

  it("uses the connection named in bindings, and refuses ones that are not the caller's", async () => {
    const second = await connect({ token: await t.factories.token(org.orgId, aliceId), org: org.orgId }, crm, KEY_B);
    const res = await alice.op('executeSyntheticTool', {
      params: { id: tool.id },
      body: { arguments: { ticket_id: 2 }, bindings: [{ connector_slug: crm, connection_id: second }] },
    });
    expect((res.body.result as { ticket: { credential: string } }).ticket.credential).toBe(KEY_B);
    expect(res.body.steps[0]?.tool.connection_id).toBe(second);
    const unknown = await alice.op('executeSyntheticTool', {
      params: { id: tool.id },
      body: {
        arguments: { ticket_id: 2 },
        bindings: [{ connector_slug: crm, connection_id: 'conn_01jg3c9q1s3v5x7z9b1d3f5h7k' }],
      },
    });
    expectError(unknown, 400, 'unknown_reference');
    expect(unknown.error?.errors).toEqual([{ in: 'body', pointer: '/bindings/0/connection_id', message: expect.any(String) }]);
    const notMine = await alice.op('executeSyntheticTool', {
      params: { id: tool.id },
      body: { arguments: { ticket_id: 2 }, bindings: [{ connector_slug: crm, connection_id: bobConn }] },
    });
    expectError(notMine, 400, 'validation_failed');
    await t.db.deleteFrom('connections').where('id', '=', second).execute();
  });

  it('runs no step through a connection received with its credentials until it is accepted, and prefers the caller’s own to it', async () => {
    const sender = { token: await t.factories.token(org.orgId, await t.factories.member(org.orgId)), org: org.orgId };
    const recipientId = await t.factories.member(org.orgId);
    const recipient = { token: await t.factories.token(org.orgId, recipientId), org: org.orgId };
    const received = await connect(sender, crm, KEY_A);
    expect((await t.as(sender).op('transferConnection', { params: { id: received }, body: { user_id: recipientId } })).status).toBe(200);
    const run = () => t.as(recipient).op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 9 } } });
    const refused = await run();
    expectError(refused, 409, 'connection_unavailable');
    expect(refused.error?.detail).toContain(`/connection/${received}/accept`);
    // Their own, made after the received one: used, not the older received one.
    const own = await connect(recipient, crm, KEY_B);
    expect(((await run()).body.result as { ticket: { credential: string } }).ticket.credential).toBe(KEY_B);
    expect((await t.as(recipient).op('acceptConnection', { params: { id: received } })).status).toBe(200);
    expect(((await run()).body.result as { ticket: { credential: string } }).ticket.credential).toBe(KEY_B);
    expect((await t.as(recipient).op('deleteConnection', { params: { id: own } })).status).toBe(204);
    expect(((await run()).body.result as { ticket: { credential: string } }).ticket.credential).toBe(KEY_A);
  });

  it('answers 409 connection_unavailable, naming the connector, to a caller without a connection', async () => {
    const res = await carol.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 3 } } });
    expectError(res, 409, 'connection_unavailable');
    expect(res.error?.detail).toContain(crm);
  });

  it('makes a connection whose key the upstream refuses needs_reauth, with its event', async () => {
    const daveId = await t.factories.member(org.orgId);
    const dave = { token: await t.factories.token(org.orgId, daveId), org: org.orgId };
    up.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob', 'key-dave-temp': 'dave' });
    const daveConn = await connect(dave, crm, 'key-dave-temp');
    up.peer.setKeys({ [KEY_A]: 'alice', [KEY_B]: 'bob' });
    const res = await t.as(dave).op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 4 } } });
    expectError(res, 409, 'connection_unavailable');
    expect(res.error?.detail).toMatch(/refused the connection's credentials/);
    const row = await t.db.selectFrom('connections').select(['status', 'status_reason']).where('id', '=', daveConn).executeTakeFirstOrThrow();
    expect(row).toEqual({ status: 'needs_reauth', status_reason: 'credentials_rejected' });
    const events = (await eventsOf(t, org.orgId, 'connection.needs_reauth')).filter((e) => e.payload.connection.id === daveConn);
    expect(events).toHaveLength(1);
    expect(events[0]?.actor_type).toBe('system');
    // Now the connection is not active: refused before any step runs.
    expectError(await t.as(dave).op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 4 } } }), 409, 'connection_unavailable');
  });
});

describe('restrictions and deletion', () => {
  async function restriction(values: {
    effect: 'deny' | 'require_approval';
    connector?: string;
    pattern?: string;
    syntheticToolId?: string;
    userIds?: string[];
  }) {
    const res = await t.as({ token: org.token, org: org.orgId }).post('/restriction', {
      name: `r-${Math.random().toString(36).slice(2, 10)}`,
      effect: values.effect,
      match: values.syntheticToolId
        ? { synthetic_tool_id: values.syntheticToolId }
        : { connector_slug: values.connector ?? null, tool_pattern: values.pattern ?? null },
      applies_to: values.userIds ? { user_ids: values.userIds } : { everyone: true },
    });
    if (res.status !== 201) throw new Error(`restriction: ${res.status} ${res.text}`);
    return res.body.id as string;
  }
  const removeRestriction = (id: string) => t.as({ token: org.token, org: org.orgId }).delete(`/restriction/${id}`);

  it('a deny on a tool one step calls refuses the whole run, before any step', async () => {
    const tool = await created(lookupThenUpdate('denied_through_step'));
    const deny = await restriction({ effect: 'deny', connector: crm, pattern: 'upd*', userIds: [bobId] });
    const mark = up.peer.seen.length;
    const res = await bob.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1 } } });
    expectError(res, 403, 'tool_restricted');
    expect(res.error?.detail).toContain(deny);
    expect(res.error?.detail).toMatch(/cannot unlock it/);
    expect(up.peer.seen.length).toBe(mark);
    // It applies to Bob only.
    expect((await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1 } } })).status).toBe(200);
    await removeRestriction(deny);
    expect((await bob.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1 } } })).status).toBe(200);
  });

  it('a require_approval naming the tool holds it until an approved access request', async () => {
    const tool = await created(lookupThenUpdate('held_tool'));
    const held = await restriction({ effect: 'require_approval', syntheticToolId: tool.id });
    const res = await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1 } } });
    expectError(res, 403, 'tool_restricted');
    expect(res.error?.detail).toContain(`restriction_id ${held}`);
    await t.db
      .insertInto('access_requests')
      .values({
        id: newId('accessRequest'),
        org_id: org.orgId,
        requester_user_id: aliceId,
        restriction_id: held,
        connector_slug: null,
        tool_name: null,
        synthetic_tool_id: tool.id,
        reason: 'Closing tickets.',
        status: 'approved',
        resolved_by_user_id: org.ownerId,
        resolved_at: new Date(),
        exception_expires_at: null,
      })
      .execute();
    expect((await alice.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1 } } })).body.is_error).toBe(false);
    expectError(await bob.op('executeSyntheticTool', { params: { id: tool.id }, body: { arguments: { ticket_id: 1 } } }), 403, 'tool_restricted');

    // Named by a restriction: not deleted, and the 409 names it.
    const blocked = await owner.op('deleteSyntheticTool', { params: { id: tool.id } });
    expectError(blocked, 409, 'conflict');
    expect(blocked.error?.detail).toContain(held);
    await removeRestriction(held);
    expect((await owner.op('deleteSyntheticTool', { params: { id: tool.id } })).status).toBe(204);
  });

  it('is not deleted while a toolbox lists it', async () => {
    const tool = await created(lookupThenUpdate('listed_tool'));
    const toolboxId = newId('toolbox');
    await t.db.insertInto('toolboxes').values({ id: toolboxId, org_id: org.orgId, name: 'Lists it', created_by_user_id: org.ownerId }).execute();
    await t.db.insertInto('toolbox_entries').values({ toolbox_id: toolboxId, position: 0, type: 'synthetic_tool', synthetic_tool_id: tool.id }).execute();
    const blocked = await owner.op('deleteSyntheticTool', { params: { id: tool.id } });
    expectError(blocked, 409, 'conflict');
    expect(blocked.error?.detail).toContain(toolboxId);
    await t.db.deleteFrom('toolbox_entries').where('toolbox_id', '=', toolboxId).execute();
    expect((await owner.op('deleteSyntheticTool', { params: { id: tool.id } })).status).toBe(204);
  });

  it('counts against the plan limit synthetic_tools', async () => {
    const limit = PLANS.free?.limits.synthetic_tools as number;
    const count = Number(
      (
        await t.db
          .selectFrom('synthetic_tools')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .where('org_id', '=', org.orgId)
          .executeTakeFirstOrThrow()
      ).n,
    );
    (PLANS.free!.limits as Record<string, number | null>).synthetic_tools = count;
    try {
      expectError(await owner.op('createSyntheticTool', { body: lookupThenUpdate('over_limit') }), 403, 'entitlement_exceeded');
    } finally {
      (PLANS.free!.limits as Record<string, number | null>).synthetic_tools = limit;
    }
  });
});
