import type { components, paths } from '../../generated/openapi';
import { PERMISSIONS } from '../../src/identity/permissions';
import { newId } from '../../src/lib/ids';
import { settle, startTestApp, type ApiClient, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';
import { customConnector } from '../fixtures/connections';

/*
 * The five restriction operations over HTTP through the typed client, against the real app
 * on a fresh database; every response is checked against the spec.
 */

type Schemas = components['schemas'];
type Create = Schemas['RestrictionCreate'];
type ListQuery = NonNullable<paths['/restriction']['get']['parameters']['query']>;
const RST = /^rst_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

let t: TestApp;
let org: SeededOrg;
let other: SeededOrg;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  other = await t.factories.org();
});
afterAll(async () => {
  await t.close();
});

function api(credential: { token?: string; session?: string; org?: string }) {
  const c: ApiClient = t.client(credential);
  const item = (id: string) => ({ params: { path: { id } } });
  return {
    raw: t.as(credential),
    list: (query: ListQuery = {}) => settle(c.GET('/restriction', { params: { query } })),
    create: (body: Create) => settle(c.POST('/restriction', { body })),
    read: (id: string) => settle(c.GET('/restriction/{id}', item(id))),
    update: (id: string, body: Schemas['RestrictionUpdate']) => settle(c.PATCH('/restriction/{id}', { ...item(id), body })),
    remove: (id: string) => settle(c.DELETE('/restriction/{id}', item(id))),
  };
}
const owner = () => api({ token: org.token, org: org.orgId });
let n = 0;
const named = (body: Omit<Create, 'name'> & { name?: string }): Create => ({ name: `Restriction ${++n}`, ...body });

const events = async (orgId: string, type: string) =>
  (await t.db.selectFrom('outbox').select(['event_type', 'payload']).where('org_id', '=', orgId).where('event_type', '=', type).orderBy('id').execute()).map(
    (e) => e.payload as any,
  );

describe('createRestriction', () => {
  it('creates with defaults, answers 201 with Location, audits and emits restriction.updated', async () => {
    const teamId = await t.factories.team(org.orgId, 'Release');
    const res = await owner().create({
      name: 'No deletes on GitHub',
      description: 'Second pair of eyes.',
      match: { connector_slug: 'tickets-demo', tool_pattern: 'delete_*' },
      effect: 'require_approval',
      applies_to: { team_ids: [teamId] },
    });
    expect(res.status).toBe(201);
    expect(res.body.id).toMatch(RST);
    expect(res.headers.get('location')).toBe(`/restriction/${res.body.id}`);
    expect(res.body).toMatchObject({
      name: 'No deletes on GitHub',
      description: 'Second pair of eyes.',
      match: { connector_slug: 'tickets-demo', tool_pattern: 'delete_*', synthetic_tool_id: null },
      effect: 'require_approval',
      applies_to: { everyone: false, role_ids: [], team_ids: [teamId], user_ids: [] },
      is_active: true,
      created_by_user_id: org.ownerId,
    });
    const [audit] = await t.factories.auditEntries(org.orgId, 'restriction.created');
    expect(audit).toMatchObject({ target_id: res.body.id, target_type: 'restriction' });
    expect((await events(org.orgId, 'restriction.updated')).at(-1)).toEqual({
      restriction: { id: res.body.id, name: 'No deletes on GitHub', effect: 'require_approval' },
      change: 'created',
    });
  });

  it('match left out covers everything; is_active false is kept', async () => {
    const res = await owner().create(named({ effect: 'deny', applies_to: { everyone: true }, is_active: false }));
    expect(res.status).toBe(201);
    expect(res.body.match).toEqual({ connector_slug: null, tool_pattern: null, synthetic_tool_id: null });
    expect(res.body.is_active).toBe(false);
  });

  it('names a synthetic tool of the organization', async () => {
    const stoolId = await syntheticTool(org.orgId);
    const res = await owner().create(named({ match: { synthetic_tool_id: stoolId }, effect: 'require_approval', applies_to: { everyone: true } }));
    expect(res.status).toBe(201);
    expect(res.body.match).toEqual({ connector_slug: null, tool_pattern: null, synthetic_tool_id: stoolId });
  });

  it('400 validation_failed for the shapes the schema cannot refuse', async () => {
    const stoolId = await syntheticTool(org.orgId);
    const roleId = await t.factories.customRole(org.orgId, []);
    for (const [body, pointer] of [
      [named({ effect: 'deny', applies_to: { everyone: true, role_ids: [roleId] } }), '/applies_to/everyone'],
      [named({ effect: 'deny', applies_to: {} }), '/applies_to'],
      [named({ effect: 'deny', applies_to: { everyone: false, user_ids: [] } }), '/applies_to'],
      [
        named({ effect: 'deny', match: { synthetic_tool_id: stoolId, connector_slug: 'tickets-demo' }, applies_to: { everyone: true } }),
        '/match/connector_slug',
      ],
      [named({ effect: 'deny', match: { synthetic_tool_id: stoolId, tool_pattern: 'x*' }, applies_to: { everyone: true } }), '/match/tool_pattern'],
    ] as const) {
      const res = await owner().create(body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
      expect(res.body.errors.map((e: { pointer: string }) => e.pointer)).toContain(pointer);
    }
    // The schema's own pattern: glob characters only.
    const bad = await owner().raw.post('/restriction', named({ effect: 'deny', match: { tool_pattern: 'delete_(.*)' }, applies_to: { everyone: true } }));
    expect([bad.status, bad.body.code]).toEqual([400, 'validation_failed']);
  });

  it('400 unknown_reference for connectors, synthetic tools, roles, teams and members not of the organization', async () => {
    const otherRole = await t.factories.customRole(other.orgId, []);
    const otherTeam = await t.factories.team(other.orgId, 'Theirs');
    const otherUser = await t.factories.member(other.orgId);
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    const otherStool = await syntheticTool(other.orgId);
    const theirConnector = await customConnector(t, other.orgId, { mcp_url: 'https://mcp.acme.example/mcp', auth: { type: 'none' } });
    const res = await owner().create(
      named({
        effect: 'deny',
        match: { connector_slug: theirConnector },
        applies_to: { role_ids: [otherRole], team_ids: [otherTeam], user_ids: [otherUser, suspended] },
      }),
    );
    expect([res.status, res.body.code]).toEqual([400, 'unknown_reference']);
    expect(res.body.errors.map((e: { pointer: string }) => e.pointer)).toEqual([
      '/match/connector_slug',
      '/applies_to/role_ids/0',
      '/applies_to/team_ids/0',
      '/applies_to/user_ids/0',
      '/applies_to/user_ids/1',
    ]);
    const stool = await owner().create(named({ effect: 'deny', match: { synthetic_tool_id: otherStool }, applies_to: { everyone: true } }));
    expect([stool.status, stool.body.code]).toEqual([400, 'unknown_reference']);
    const none = await owner().create(named({ effect: 'deny', match: { synthetic_tool_id: newId('syntheticTool') }, applies_to: { everyone: true } }));
    expect([none.status, none.body.code]).toEqual([400, 'unknown_reference']);
  });

  it('takes a custom connector of the organization (shared or not) and a built-in one', async () => {
    const mine = await customConnector(t, org.orgId, { mcp_url: 'https://mcp.acme.example/mcp', auth: { type: 'none' }, share: false });
    expect((await owner().create(named({ effect: 'deny', match: { connector_slug: mine }, applies_to: { everyone: true } }))).status).toBe(201);
    expect((await owner().create(named({ effect: 'deny', match: { connector_slug: 'tickets-demo' }, applies_to: { everyone: true } }))).status).toBe(201);
  });

  it('409 name_taken', async () => {
    await owner().create({ name: 'Taken', effect: 'deny', applies_to: { everyone: true } });
    const res = await owner().create({ name: 'Taken', effect: 'deny', applies_to: { everyone: true } });
    expect([res.status, res.body.code]).toEqual([409, 'name_taken']);
    // Another organization may use the name.
    expect((await api({ token: other.token, org: other.orgId }).create({ name: 'Taken', effect: 'deny', applies_to: { everyone: true } })).status).toBe(201);
  });

  it('403 missing_permission without restriction:manage; a viewer still reads', async () => {
    const roleId = await t.factories.customRole(org.orgId, ['restriction:view']);
    const viewer = await t.factories.member(org.orgId, { roles: [roleId] });
    const as = api({ token: await t.factories.token(org.orgId, viewer), org: org.orgId });
    const res = await as.create(named({ effect: 'deny', applies_to: { everyone: true } }));
    expect([res.status, res.body.code]).toEqual([403, 'missing_permission']);
    expect((await as.list()).status).toBe(200);
  });
});

describe('listRestrictions and getRestriction', () => {
  let fresh: SeededOrg;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    fresh = await t.factories.org();
    const as = api({ token: fresh.token, org: fresh.orgId });
    const stoolId = await syntheticTool(fresh.orgId);
    ids.github = (await as.create({ name: 'a', effect: 'deny', match: { connector_slug: 'tickets-demo' }, applies_to: { everyone: true } })).body.id;
    ids.any = (await as.create({ name: 'b', effect: 'require_approval', match: { tool_pattern: 'x*' }, applies_to: { everyone: true } })).body.id;
    ids.stool = (await as.create({ name: 'c', effect: 'require_approval', match: { synthetic_tool_id: stoolId }, applies_to: { everyone: true } })).body.id;
    ids.inactive = (
      await as.create({
        name: 'd',
        effect: 'deny',
        match: { connector_slug: 'tickets-demo', tool_pattern: 'y' },
        applies_to: { everyone: true },
        is_active: false,
      })
    ).body.id;
    ids.stoolId = stoolId;
  });

  it('pages oldest first', async () => {
    const as = api({ token: fresh.token, org: fresh.orgId });
    const first = await as.list({ limit: 3 });
    expect(first.body.data.map((r: { id: string }) => r.id)).toEqual([ids.github, ids.any, ids.stool]);
    const second = await as.list({ limit: 3, cursor: first.body.next_cursor });
    expect(second.body).toEqual({ data: [expect.objectContaining({ id: ids.inactive })], next_cursor: null });
  });

  it('filters by effect, connector, synthetic tool and is_active', async () => {
    const as = api({ token: fresh.token, org: fresh.orgId });
    const idsOf = async (query: ListQuery) => (await as.list(query)).body.data.map((r: { id: string }) => r.id);
    expect(await idsOf({ effect: 'deny' })).toEqual([ids.github, ids.inactive]);
    expect(await idsOf({ connector_slug: 'tickets-demo' })).toEqual([ids.github, ids.inactive]);
    expect(await idsOf({ synthetic_tool_id: ids.stoolId })).toEqual([ids.stool]);
    expect(await idsOf({ is_active: false })).toEqual([ids.inactive]);
    expect(await idsOf({ is_active: true, effect: 'require_approval' })).toEqual([ids.any, ids.stool]);
  });

  it('400 unknown_reference for a filter naming a connector the caller cannot see or a synthetic tool not of the organization', async () => {
    const as = api({ token: fresh.token, org: fresh.orgId });
    const res = await as.list({ connector_slug: 'no-such-connector', synthetic_tool_id: newId('syntheticTool') });
    expect([res.status, res.body.code]).toEqual([400, 'unknown_reference']);
    expect(res.body.errors.map((e: { pointer: string }) => e.pointer)).toEqual(['/connector_slug', '/synthetic_tool_id']);
    // An unshared custom connector is invisible to a viewer without connector:manage.
    const hidden = await customConnector(t, fresh.orgId, { mcp_url: 'https://mcp.acme.example/mcp', auth: { type: 'none' }, share: false });
    const roleId = await t.factories.customRole(fresh.orgId, ['restriction:view']);
    const viewer = await t.factories.member(fresh.orgId, { roles: [roleId] });
    const v = api({ token: await t.factories.token(fresh.orgId, viewer), org: fresh.orgId });
    expect((await v.list({ connector_slug: hidden })).body.code).toBe('unknown_reference');
    expect((await as.list({ connector_slug: hidden })).status).toBe(200);
  });

  it('gets one; 404 for another organization’s id and an unknown one', async () => {
    const as = api({ token: fresh.token, org: fresh.orgId });
    expect((await as.read(ids.github as string)).body).toMatchObject({ id: ids.github, name: 'a' });
    const theirs = await owner().read(ids.github as string);
    expect([theirs.status, theirs.body.code]).toEqual([404, 'not_found']);
    expect((await as.read(newId('restriction'))).status).toBe(404);
  });

  it('a role, team or member that is gone drops out of applies_to', async () => {
    const as = api({ token: fresh.token, org: fresh.orgId });
    const roleId = await t.factories.customRole(fresh.orgId, []);
    const teamId = await t.factories.team(fresh.orgId, 'Gone');
    const userId = await t.factories.member(fresh.orgId);
    const created = await as.create({ name: 'drops', effect: 'deny', applies_to: { role_ids: [roleId], team_ids: [teamId], user_ids: [userId] } });
    await t.db.deleteFrom('teams').where('id', '=', teamId).execute();
    await t.db.deleteFrom('role_assignments').where('role_id', '=', roleId).execute();
    await t.db.deleteFrom('roles').where('id', '=', roleId).execute();
    await t.db.updateTable('memberships').set({ status: 'removed' }).where('org_id', '=', fresh.orgId).where('user_id', '=', userId).execute();
    expect((await as.read(created.body.id)).body.applies_to).toEqual({ everyone: false, role_ids: [], team_ids: [], user_ids: [] });
  });
});

describe('updateRestriction', () => {
  it('changes what is sent; match and applies_to replace whole; audits the changed members; emits', async () => {
    const roleId = await t.factories.customRole(org.orgId, []);
    const created = await owner().create(
      named({ effect: 'require_approval', match: { connector_slug: 'tickets-demo', tool_pattern: 'delete_*' }, applies_to: { everyone: true } }),
    );
    const res = await owner().update(created.body.id, { match: { tool_pattern: 'delete_*' }, effect: 'deny', applies_to: { role_ids: [roleId] } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      name: created.body.name,
      match: { connector_slug: null, tool_pattern: 'delete_*', synthetic_tool_id: null },
      effect: 'deny',
      applies_to: { everyone: false, role_ids: [roleId], team_ids: [], user_ids: [] },
      is_active: true,
    });
    const audit = (await t.factories.auditEntries(org.orgId, 'restriction.updated')).at(-1);
    expect(Object.keys(audit?.changes ?? {}).sort()).toEqual(['applies_to', 'effect', 'match']);
    expect(audit?.changes.effect).toEqual({ from: created.body.effect, to: 'deny' });
    expect(audit?.changes.match).toEqual({ from: created.body.match, to: { connector_slug: null, tool_pattern: 'delete_*', synthetic_tool_id: null } });
    expect((await events(org.orgId, 'restriction.updated')).at(-1)).toEqual({
      restriction: { id: created.body.id, name: created.body.name, effect: 'deny' },
      change: 'updated',
    });
    const off = await owner().update(created.body.id, { is_active: false, name: 'Renamed', description: null });
    expect(off.body).toMatchObject({ is_active: false, name: 'Renamed', description: null, effect: 'deny' });
  });

  it('refuses bad shapes, unknown references, a taken name; 404 for another organization’s', async () => {
    const a = await owner().create(named({ effect: 'deny', applies_to: { everyone: true } }));
    const b = await owner().create(named({ effect: 'deny', applies_to: { everyone: true } }));
    expect((await owner().update(b.body.id, { applies_to: { everyone: true, user_ids: [org.ownerId] } })).body.code).toBe('validation_failed');
    expect((await owner().update(b.body.id, { applies_to: { team_ids: [newId('team')] } })).body.code).toBe('unknown_reference');
    expect((await owner().update(b.body.id, { match: { connector_slug: 'no-such' } })).body.code).toBe('unknown_reference');
    const taken = await owner().update(b.body.id, { name: a.body.name });
    expect([taken.status, taken.body.code]).toEqual([409, 'name_taken']);
    const empty = await owner().raw.patch(`/restriction/${b.body.id}`, {});
    expect([empty.status, empty.body.code]).toEqual([400, 'validation_failed']);
    const theirs = await api({ token: other.token, org: other.orgId }).update(b.body.id, { is_active: false });
    expect([theirs.status, theirs.body.code]).toEqual([404, 'not_found']);
  });
});

describe('deleteRestriction', () => {
  it('deletes, closes its pending access requests as denied by the system, keeps the rest readable', async () => {
    const memberId = await t.factories.member(org.orgId);
    const member = api({ token: await t.factories.token(org.orgId, memberId, PERMISSIONS), org: org.orgId });
    const created = await owner().create(named({ effect: 'require_approval', match: { tool_pattern: 'delete_*' }, applies_to: { everyone: true } }));
    const file = (body: Record<string, unknown>) => member.raw.post('/access-request', { restriction_id: created.body.id, reason: 'Need it', ...body });
    const pending1 = (await file({ tool_name: 'delete_a' })).body.id;
    const pending2 = (await file({ tool_name: 'delete_b' })).body.id;
    const withdrawn = (await file({ tool_name: 'delete_c' })).body.id;
    await member.raw.post(`/access-request/${withdrawn}/withdraw`);

    const res = await owner().remove(created.body.id);
    expect(res.status).toBe(204);
    expect((await owner().read(created.body.id)).status).toBe(404);
    const again = await owner().remove(created.body.id);
    expect([again.status, again.body.code]).toEqual([404, 'not_found']);

    for (const id of [pending1, pending2]) {
      const read = await owner().raw.get(`/access-request/${id}`);
      expect(read.body).toMatchObject({ status: 'denied', resolved_by_user_id: null, exception_expires_at: null });
      expect(read.body.resolved_at).not.toBeNull();
      expect(read.body.resolution_note).toEqual(expect.any(String));
    }
    expect((await owner().raw.get(`/access-request/${withdrawn}`)).body.status).toBe('withdrawn');
    const resolved = (await events(org.orgId, 'access_request.resolved')).filter((e) => [pending1, pending2].includes(e.access_request.id));
    expect(resolved).toEqual([
      { access_request: expect.objectContaining({ id: pending1, status: 'denied', restriction_id: created.body.id }), resolved_by_user_id: null },
      { access_request: expect.objectContaining({ id: pending2, status: 'denied' }), resolved_by_user_id: null },
    ]);
    expect((await events(org.orgId, 'restriction.updated')).at(-1)).toEqual({
      restriction: { id: created.body.id, name: created.body.name, effect: 'require_approval' },
      change: 'deleted',
    });
    const [audit] = (await t.factories.auditEntries(org.orgId, 'restriction.deleted')).slice(-1);
    expect(audit?.changes).toMatchObject({ name: created.body.name, closed_access_request_ids: [pending1, pending2] });
  });

  it('404 for another organization’s restriction, which stays', async () => {
    const created = await owner().create(named({ effect: 'deny', applies_to: { everyone: true } }));
    const res = await api({ token: other.token, org: other.orgId }).remove(created.body.id);
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await owner().read(created.body.id)).status).toBe(200);
  });
});

/** A synthetic tool row: its operations are another branch's; restrictions only need one to exist. */
export async function syntheticTool(
  orgId: string,
  steps: { connector_slug: string; tool: string }[] = [{ connector_slug: 'tickets-demo', tool: 'list_repos' }],
): Promise<string> {
  const id = newId('syntheticTool');
  await t.db
    .insertInto('synthetic_tools')
    .values({
      id,
      org_id: orgId,
      name: `Synthetic ${id}`,
      description: 'A fixture.',
      input_schema: JSON.stringify({ type: 'object' }),
      output_schema: null,
      steps: JSON.stringify(steps.map((s, i) => ({ id: `s${i}`, connector_slug: s.connector_slug, tool: s.tool, arguments: {} }))),
      output: JSON.stringify({}),
      created_by_user_id: null,
    })
    .execute();
  return id;
}
