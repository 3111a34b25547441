import { randomBytes } from 'node:crypto';
import type { components } from '../../generated/openapi';
import { auditDigest } from '../../src/http/context';
import { startTestApp, type TestApp } from '../support/app';
import { expectError, type Who } from '../support/client';
import type { SeededOrg } from '../support/factories';
import { customConnector } from '../fixtures/connections';

/*
 * Templates over HTTP through the typed client: entries over connectors the caller sees,
 * visibility through ownership, shares (user, team, organization) and template:manage,
 * transfer, shares, and the connector usage they count as (deleteConnector's 409).
 */

type Schemas = components['schemas'];
const unique = () => randomBytes(4).toString('hex');

/** A caller: an API token and the organization it acts in. */
type Caller = { token: string; org: string };

let t: TestApp;
let org: SeededOrg;
let owner: Caller;
/** Alice and Bob are plain members (template:view); Carol manages templates but not connectors. */
let aliceId: string;
let bobId: string;
let carolId: string;
let alice: Caller;
let bob: Caller;
let carol: Caller;
let teamId: string;
/** A custom connector declaring two tools, shared with the organization; and one shared with nobody. */
let crm: string;
let hidden: string;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  owner = { token: org.token, org: org.orgId };
  aliceId = await t.factories.member(org.orgId);
  bobId = await t.factories.member(org.orgId);
  const templateManager = await t.factories.customRole(org.orgId, ['template:view', 'template:manage', 'connector:view']);
  carolId = await t.factories.member(org.orgId, { roles: [templateManager] });
  alice = { token: await t.factories.token(org.orgId, aliceId), org: org.orgId };
  bob = { token: await t.factories.token(org.orgId, bobId), org: org.orgId };
  carol = { token: await t.factories.token(org.orgId, carolId), org: org.orgId };
  teamId = await t.factories.team(org.orgId, `Sales ${unique()}`, [bobId]);
  const made = await t.as(owner).op('createConnector', {
    body: {
      slug: `crm-${unique()}`,
      name: 'Acme CRM',
      mcp_url: 'https://mcp.crm.example/mcp',
      auth: { type: 'none' },
      tools: [
        { name: 'search_contacts', description: 'Finds contacts.', input_schema: { type: 'object' } },
        { name: 'create_deal', description: 'Creates a deal.', input_schema: { type: 'object' } },
      ],
    },
  });
  expect(made.status).toBe(201);
  crm = made.body.slug;
  expect(
    (await t.as(owner).op('shareConnector', { params: { slug: crm }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } })).status,
  ).toBe(201);
  hidden = await customConnector(t, org.orgId, { mcp_url: 'https://mcp.hidden.example/mcp', auth: { type: 'none' }, share: false });
});
afterAll(() => t.close());

const body = (overrides: Partial<Schemas['TemplateCreate']> = {}): Schemas['TemplateCreate'] => ({
  name: `Sales assistant ${unique()}`,
  description: 'CRM lookups for the sales engineers.',
  entries: [
    { connector_slug: crm, tools: ['search_contacts'] },
    { connector_slug: 'docs-demo', tools: 'all' },
  ],
  ...overrides,
});

async function created(who: Who = owner, overrides: Partial<Schemas['TemplateCreate']> = {}) {
  const res = await t.as(who).op('createTemplate', { body: body(overrides) });
  expect(res.status).toBe(201);
  return res.body as Schemas['Template'];
}

describe('create and read', () => {
  it('creates a template owned by the caller, in the order given, with its audit entry', async () => {
    const res = await t.as(carol).op('createTemplate', { body: body({ name: 'Sales assistant' }) });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/template/${res.body.id}`);
    expect(res.body).toMatchObject({
      id: expect.stringMatching(/^tpl_/),
      name: 'Sales assistant',
      description: 'CRM lookups for the sales engineers.',
      owner_user_id: carolId,
      entries: [
        { connector_slug: crm, tools: ['search_contacts'] },
        { connector_slug: 'docs-demo', tools: 'all' },
      ],
    });
    expect((await t.as(carol).op('getTemplate', { params: { id: res.body.id } })).body).toEqual(res.body);
    const audit = (await t.factories.auditEntries(org.orgId, 'template.created')).find((e) => e.target_id === res.body.id);
    expect(audit).toMatchObject({ actor_user_id: carolId, changes: { name: 'Sales assistant' } });
    expectError(await t.as(carol).op('createTemplate', { body: body({ name: 'Sales assistant' }) }), 409, 'name_taken');
  });

  it('refuses a repeated connector and a tool the connector does not declare with 400 validation_failed', async () => {
    const repeated = await t.as(owner).op('createTemplate', {
      body: body({
        entries: [
          { connector_slug: crm, tools: 'all' },
          { connector_slug: crm, tools: ['create_deal'] },
        ],
      }),
    });
    expectError(repeated, 400, 'validation_failed');
    expect(repeated.error?.errors).toEqual([expect.objectContaining({ in: 'body', pointer: '/entries/1/connector_slug' })]);
    const tool = await t
      .as(owner)
      .op('createTemplate', { body: body({ entries: [{ connector_slug: 'docs-demo', tools: ['search_docs', 'delete_everything'] }] }) });
    expectError(tool, 400, 'validation_failed');
    expect(tool.error?.errors).toEqual([expect.objectContaining({ in: 'body', pointer: '/entries/0/tools/1' })]);
    const shape = await t.as(owner).post('/template', { name: 'x', entries: [{ connector_slug: crm, tools: 'some' }] });
    expectError(shape, 400, 'validation_failed');
    expectError(await t.as(owner).post('/template', { name: 'x', entries: [] }), 400, 'validation_failed');
  });

  it('refuses a connector the caller cannot see with 400 unknown_reference naming the entry', async () => {
    // Carol lacks connector:manage and the connector is shared with nobody.
    const res = await t.as(carol).op('createTemplate', {
      body: body({
        entries: [
          { connector_slug: 'docs-demo', tools: 'all' },
          { connector_slug: hidden, tools: 'all' },
        ],
      }),
    });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors).toEqual([expect.objectContaining({ in: 'body', pointer: '/entries/1/connector_slug' })]);
    const none = await t.as(carol).op('createTemplate', { body: body({ entries: [{ connector_slug: 'no-such-connector', tools: 'all' }] }) });
    expectError(none, 400, 'unknown_reference');
    // The owner (connector:manage) sees it.
    expect((await t.as(owner).op('createTemplate', { body: body({ entries: [{ connector_slug: hidden, tools: 'all' }] }) })).status).toBe(201);
  });

  it('needs template:manage to create, whatever a member sees', async () => {
    expectError(await t.as(alice).op('createTemplate', { body: body() }), 403, 'missing_permission');
  });
});

describe('who sees which template', () => {
  it('shows a plain member only what is shared with them, through a user, team or organization share', async () => {
    const tpl = await created(owner);
    expectError(await t.as(alice).op('getTemplate', { params: { id: tpl.id } }), 404, 'not_found');
    expectError(await t.as(alice).op('listTemplateShares', { params: { id: tpl.id } }), 404, 'not_found');
    expect((await t.as(alice).op('listTemplates', { query: { limit: 200 } })).body.data.map((x: { id: string }) => x.id)).not.toContain(tpl.id);

    const toAlice = await t.as(owner).op('shareTemplate', { params: { id: tpl.id }, body: { principal: { type: 'user', id: aliceId }, level: 'use' } });
    expect(toAlice.status).toBe(201);
    expect(toAlice.headers.get('location')).toBe(`/template/${tpl.id}/share/${toAlice.body.id}`);
    expect(toAlice.body).toMatchObject({
      resource_type: 'template',
      resource_id: tpl.id,
      principal: { type: 'user', id: aliceId },
      level: 'use',
      created_by_user_id: org.ownerId,
    });
    expect((await t.as(alice).op('getTemplate', { params: { id: tpl.id } })).body.id).toBe(tpl.id);
    expect((await t.as(alice).op('listTemplates', { query: { limit: 200 } })).body.data.map((x: { id: string }) => x.id)).toContain(tpl.id);
    expect((await t.as(alice).op('listTemplateShares', { params: { id: tpl.id } })).body.data.map((s: { id: string }) => s.id)).toEqual([toAlice.body.id]);
    expectError(await t.as(bob).op('getTemplate', { params: { id: tpl.id } }), 404, 'not_found');

    // Sharing again answers 200 with the same share, its level changed.
    const again = await t.as(owner).op('shareTemplate', { params: { id: tpl.id }, body: { principal: { type: 'user', id: aliceId }, level: 'edit' } });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: toAlice.body.id, level: 'edit' });
    const audit = (await t.factories.auditEntries(org.orgId, 'template.shared')).filter((e) => e.target_id === tpl.id);
    expect(audit.map((e) => e.changes.level)).toEqual([
      { from: null, to: 'use' },
      { from: 'use', to: 'edit' },
    ]);

    // An edit share lifts nothing: changing still needs template:manage.
    expectError(await t.as(alice).op('updateTemplate', { params: { id: tpl.id }, body: { name: 'Mine now' } }), 403, 'missing_permission');
    expectError(
      await t.as(alice).op('shareTemplate', { params: { id: tpl.id }, body: { principal: { type: 'user', id: bobId }, level: 'use' } }),
      403,
      'missing_permission',
    );

    const toTeam = await t.as(owner).op('shareTemplate', { params: { id: tpl.id }, body: { principal: { type: 'team', id: teamId }, level: 'use' } });
    expect(toTeam.status).toBe(201);
    expect((await t.as(bob).op('getTemplate', { params: { id: tpl.id } })).status).toBe(200);

    expect((await t.as(owner).op('revokeTemplateShare', { params: { id: tpl.id, aclId: toAlice.body.id } })).status).toBe(204);
    expectError(await t.as(alice).op('getTemplate', { params: { id: tpl.id } }), 404, 'not_found');
    expectError(await t.as(owner).op('revokeTemplateShare', { params: { id: tpl.id, aclId: toAlice.body.id } }), 404, 'not_found');
    expect((await t.factories.auditEntries(org.orgId, 'template.share_revoked')).some((e) => e.target_id === tpl.id)).toBe(true);

    const toOrg = await t.as(owner).op('shareTemplate', { params: { id: tpl.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
    expect(toOrg.status).toBe(201);
    expect((await t.as(alice).op('getTemplate', { params: { id: tpl.id } })).status).toBe(200);
    expect((await t.as(owner).op('listTemplateShares', { params: { id: tpl.id } })).body.data.map((s: { id: string }) => s.id)).toEqual([
      toTeam.body.id,
      toOrg.body.id,
    ]);
  });

  it('shows a template:manage holder every template, and the owner always their own', async () => {
    const mine = await created(carol);
    const theirs = await created(owner);
    expect((await t.as(carol).op('getTemplate', { params: { id: theirs.id } })).status).toBe(200);
    // Carol's token narrowed to template:view sees only her own.
    const narrowed = { token: await t.factories.token(org.orgId, carolId, ['template:view']), org: org.orgId };
    expect((await t.as(narrowed).op('getTemplate', { params: { id: mine.id } })).status).toBe(200);
    expectError(await t.as(narrowed).op('getTemplate', { params: { id: theirs.id } }), 404, 'not_found');
  });

  it('refuses a principal that is not an active member, a team or this organization', async () => {
    const tpl = await created(owner);
    const other = await t.factories.org();
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    for (const principal of [
      { type: 'organization' as const, id: other.orgId },
      { type: 'user' as const, id: suspended },
      { type: 'user' as const, id: other.ownerId },
    ]) {
      const res = await t.as(owner).op('shareTemplate', { params: { id: tpl.id }, body: { principal, level: 'use' } });
      expectError(res, 400, 'unknown_reference');
      expect(res.error?.errors).toEqual([expect.objectContaining({ pointer: '/principal/id' })]);
    }
  });

  it('lists with filters, walking every page once', async () => {
    const extra = await t.factories.member(org.orgId, { roles: ['admin'] });
    const admin = { token: await t.factories.token(org.orgId, extra), org: org.orgId };
    const ids = [] as string[];
    for (let i = 0; i < 5; i += 1) ids.push((await created(admin, { entries: [{ connector_slug: i % 2 === 0 ? crm : 'docs-demo', tools: 'all' }] })).id);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await t.as(admin).op('listTemplates', { query: { limit: 2, owner_user_id: extra, ...(cursor ? { cursor } : {}) } });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((x: { id: string }) => x.id));
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(ids);
    const byConnector = await t.as(admin).op('listTemplates', { query: { limit: 200, owner_user_id: extra, connector_slug: crm } });
    expect(byConnector.body.data.map((x: { id: string }) => x.id)).toEqual([ids[0], ids[2], ids[4]]);
    const stranger = await t.factories.user();
    const bad = await t.as(admin).op('listTemplates', { query: { owner_user_id: stranger, connector_slug: 'no-such-connector' } });
    expectError(bad, 400, 'unknown_reference');
    expect(bad.error?.errors.map((e: { pointer: string }) => e.pointer).sort()).toEqual(['/connector_slug', '/owner_user_id']);
    expectError(await t.as(carol).op('listTemplates', { query: { connector_slug: hidden } }), 400, 'unknown_reference');
    expectError(await t.as(admin).op('listTemplates', { query: { cursor: 'bm9wZQ' } }), 400, 'invalid_cursor');
  });
});

describe('update, transfer, delete', () => {
  it('replaces the entries wholesale and records the changed members', async () => {
    const tpl = await created(owner);
    const res = await t.as(owner).op('updateTemplate', { params: { id: tpl.id }, body: { entries: [{ connector_slug: 'docs-demo', tools: ['get_page'] }] } });
    expect(res.status).toBe(200);
    expect(res.body.entries).toEqual([{ connector_slug: 'docs-demo', tools: ['get_page'] }]);
    expect(res.body.name).toBe(tpl.name);
    const renamed = await t.as(owner).op('updateTemplate', { params: { id: tpl.id }, body: { name: `${tpl.name} (EU)`, description: null } });
    expect(renamed.body).toMatchObject({ name: `${tpl.name} (EU)`, description: null, entries: [{ connector_slug: 'docs-demo', tools: ['get_page'] }] });
    const audit = (await t.factories.auditEntries(org.orgId, 'template.updated')).filter((e) => e.target_id === tpl.id);
    expect(audit.map((e) => e.changes)).toEqual([
      { entries: { from: auditDigest(tpl.entries), to: auditDigest([{ connector_slug: 'docs-demo', tools: ['get_page'] }]) } },
      { name: { from: tpl.name, to: `${tpl.name} (EU)` }, description: { from: tpl.description, to: null } },
    ]);
    expect(tpl.description).not.toBeNull();
    const other = await created(owner);
    expectError(await t.as(owner).op('updateTemplate', { params: { id: other.id }, body: { name: `${tpl.name} (EU)` } }), 409, 'name_taken');
    const unseen = await t.as(carol).op('updateTemplate', { params: { id: tpl.id }, body: { entries: [{ connector_slug: hidden, tools: 'all' }] } });
    expectError(unseen, 400, 'unknown_reference');
    expect(unseen.error?.errors).toEqual([expect.objectContaining({ pointer: '/entries/0/connector_slug' })]);
    expectError(await t.as(owner).patch(`/template/${tpl.id}`, {}), 400, 'validation_failed');
  });

  it('transfers to an active member, who then sees it; the previous owner only through template:manage or a share', async () => {
    const tpl = await created(carol);
    const res = await t.as(carol).op('transferTemplate', { params: { id: tpl.id }, body: { user_id: aliceId } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: tpl.id, owner_user_id: aliceId });
    expect((await t.as(alice).op('getTemplate', { params: { id: tpl.id } })).body.owner_user_id).toBe(aliceId);
    const narrowed = { token: await t.factories.token(org.orgId, carolId, ['template:view']), org: org.orgId };
    expectError(await t.as(narrowed).op('getTemplate', { params: { id: tpl.id } }), 404, 'not_found');
    const audit = (await t.factories.auditEntries(org.orgId, 'template.transferred')).find((e) => e.target_id === tpl.id);
    expect(audit?.changes).toEqual({ owner_user_id: { from: carolId, to: aliceId } });

    expectError(await t.as(carol).op('transferTemplate', { params: { id: tpl.id }, body: { user_id: aliceId } }), 409, 'conflict');
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    const refused = await t.as(carol).op('transferTemplate', { params: { id: tpl.id }, body: { user_id: suspended } });
    expectError(refused, 400, 'unknown_reference');
    expect(refused.error?.errors).toEqual([expect.objectContaining({ pointer: '/user_id' })]);
    expectError(
      await t.as(carol).op('transferTemplate', { params: { id: tpl.id }, body: { user_id: (await t.factories.org()).ownerId } }),
      400,
      'unknown_reference',
    );
    expectError(await t.as(alice).op('transferTemplate', { params: { id: tpl.id }, body: { user_id: bobId } }), 403, 'missing_permission');
  });

  it('deletes the template and its shares', async () => {
    const tpl = await created(owner);
    await t.as(owner).op('shareTemplate', { params: { id: tpl.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
    expect((await t.as(owner).op('deleteTemplate', { params: { id: tpl.id } })).status).toBe(204);
    expectError(await t.as(owner).op('getTemplate', { params: { id: tpl.id } }), 404, 'not_found');
    expectError(await t.as(owner).op('deleteTemplate', { params: { id: tpl.id } }), 404, 'not_found');
    const left = await t.db.selectFrom('shares').select('id').where('resource_type', '=', 'template').where('resource_id', '=', tpl.id).execute();
    expect(left).toEqual([]);
    expect((await t.factories.auditEntries(org.orgId, 'template.deleted')).some((e) => e.target_id === tpl.id)).toBe(true);
  });
});

describe('connector usage', () => {
  it('makes deleteConnector answer 409 connector_in_use while a template entry names the connector', async () => {
    const slug = `usage-${unique()}`;
    expect(
      (await t.as(owner).op('createConnector', { body: { slug, name: 'Usage', mcp_url: 'https://mcp.usage.example/mcp', auth: { type: 'none' } } })).status,
    ).toBe(201);
    const tpl = await created(owner, {
      entries: [
        { connector_slug: slug, tools: 'all' },
        { connector_slug: 'docs-demo', tools: 'all' },
      ],
    });
    const refused = await t.as(owner).op('deleteConnector', { params: { slug } });
    expectError(refused, 409, 'connector_in_use');
    expect(refused.error?.detail).toContain('1 template');
    await t.as(owner).op('updateTemplate', { params: { id: tpl.id }, body: { entries: [{ connector_slug: 'docs-demo', tools: 'all' }] } });
    expect((await t.as(owner).op('deleteConnector', { params: { slug } })).status).toBe(204);
  });
});

describe('tenant isolation', () => {
  it("answers 404 for another organization's template and leaves it as it was", async () => {
    const other = await t.factories.org();
    // The other organization does not see this one's custom connector: it names a built-in one.
    expectError(await t.as(other).op('createTemplate', { body: body() }), 400, 'unknown_reference');
    const theirs = await created(other, { entries: [{ connector_slug: 'docs-demo', tools: 'all' }] });
    expectError(await t.as(owner).op('getTemplate', { params: { id: theirs.id } }), 404, 'not_found');
    expectError(await t.as(owner).op('updateTemplate', { params: { id: theirs.id }, body: { name: 'Taken over' } }), 404, 'not_found');
    expectError(await t.as(owner).op('transferTemplate', { params: { id: theirs.id }, body: { user_id: org.ownerId } }), 404, 'not_found');
    expectError(
      await t.as(owner).op('shareTemplate', { params: { id: theirs.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } }),
      404,
      'not_found',
    );
    expectError(await t.as(owner).op('deleteTemplate', { params: { id: theirs.id } }), 404, 'not_found');
    expect((await t.as(owner).op('listTemplates', { query: { limit: 200 } })).body.data.map((x: { id: string }) => x.id)).not.toContain(theirs.id);
    const still = await t.as(other).op('getTemplate', { params: { id: theirs.id } });
    expect(still.body).toEqual(theirs);
  });
});
