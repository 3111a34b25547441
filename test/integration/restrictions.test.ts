import type { components, paths } from '../../generated/openapi';
import { PERMISSIONS } from '../../src/identity/permissions';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
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

let n = 0;
const named = (body: Omit<Create, 'name'> & { name?: string }): Create => ({ name: `Restriction ${++n}`, ...body });

const events = async (orgId: string, type: string) =>
  (await t.db.selectFrom('outbox').select(['event_type', 'payload']).where('org_id', '=', orgId).where('event_type', '=', type).orderBy('id').execute()).map(
    (e) => e.payload as any,
  );

describe('createRestriction', () => {
  it('creates with defaults, answers 201 with Location, audits and emits restriction.updated', async () => {
    const teamId = await t.factories.team(org.orgId, 'Release');
    const res = await t.as(org).op('createRestriction', {
      body: {
        name: 'No deletes on GitHub',
        description: 'Second pair of eyes.',
        match: { connector_slug: 'tickets-demo', tool_pattern: 'delete_*' },
        effect: 'require_approval',
        applies_to: { team_ids: [teamId] },
      },
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
    const res = await t.as(org).op('createRestriction', { body: named({ effect: 'deny', applies_to: { everyone: true }, is_active: false }) });
    expect(res.status).toBe(201);
    expect(res.body.match).toEqual({ connector_slug: null, tool_pattern: null, synthetic_tool_id: null });
    expect(res.body.is_active).toBe(false);
  });

  it('names a synthetic tool of the organization', async () => {
    const stoolId = await syntheticTool(org.orgId);
    const res = await t
      .as(org)
      .op('createRestriction', { body: named({ match: { synthetic_tool_id: stoolId }, effect: 'require_approval', applies_to: { everyone: true } }) });
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
      const res = await t.as(org).op('createRestriction', { body });
      expectError(res, 400, 'validation_failed');
      expect(res.error?.errors.map((e: { pointer: string }) => e.pointer)).toContain(pointer);
    }
    // The schema's own pattern: glob characters only.
    const bad = await t.as(org).post('/restriction', named({ effect: 'deny', match: { tool_pattern: 'delete_(.*)' }, applies_to: { everyone: true } }));
    expect([bad.status, bad.body.code]).toEqual([400, 'validation_failed']);
  });

  it('400 unknown_reference for connectors, synthetic tools, roles, teams and members not of the organization', async () => {
    const otherRole = await t.factories.customRole(other.orgId, []);
    const otherTeam = await t.factories.team(other.orgId, 'Theirs');
    const otherUser = await t.factories.member(other.orgId);
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    const otherStool = await syntheticTool(other.orgId);
    const theirConnector = await customConnector(t, other.orgId, { mcp_url: 'https://mcp.acme.example/mcp', auth: { type: 'none' } });
    const res = await t.as(org).op('createRestriction', {
      body: named({
        effect: 'deny',
        match: { connector_slug: theirConnector },
        applies_to: { role_ids: [otherRole], team_ids: [otherTeam], user_ids: [otherUser, suspended] },
      }),
    });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors.map((e: { pointer: string }) => e.pointer)).toEqual([
      '/match/connector_slug',
      '/applies_to/role_ids/0',
      '/applies_to/team_ids/0',
      '/applies_to/user_ids/0',
      '/applies_to/user_ids/1',
    ]);
    const stool = await t
      .as(org)
      .op('createRestriction', { body: named({ effect: 'deny', match: { synthetic_tool_id: otherStool }, applies_to: { everyone: true } }) });
    expectError(stool, 400, 'unknown_reference');
    const none = await t
      .as(org)
      .op('createRestriction', { body: named({ effect: 'deny', match: { synthetic_tool_id: newId('syntheticTool') }, applies_to: { everyone: true } }) });
    expectError(none, 400, 'unknown_reference');
  });

  it('takes a custom connector of the organization (shared or not) and a built-in one', async () => {
    const mine = await customConnector(t, org.orgId, { mcp_url: 'https://mcp.acme.example/mcp', auth: { type: 'none' }, share: false });
    expect(
      (await t.as(org).op('createRestriction', { body: named({ effect: 'deny', match: { connector_slug: mine }, applies_to: { everyone: true } }) })).status,
    ).toBe(201);
    expect(
      (await t.as(org).op('createRestriction', { body: named({ effect: 'deny', match: { connector_slug: 'tickets-demo' }, applies_to: { everyone: true } }) }))
        .status,
    ).toBe(201);
  });

  it('409 name_taken', async () => {
    await t.as(org).op('createRestriction', { body: { name: 'Taken', effect: 'deny', applies_to: { everyone: true } } });
    const res = await t.as(org).op('createRestriction', { body: { name: 'Taken', effect: 'deny', applies_to: { everyone: true } } });
    expectError(res, 409, 'name_taken');
    // Another organization may use the name.
    expect((await t.as(other).op('createRestriction', { body: { name: 'Taken', effect: 'deny', applies_to: { everyone: true } } })).status).toBe(201);
  });

  it('403 missing_permission without restriction:manage; a viewer still reads', async () => {
    const roleId = await t.factories.customRole(org.orgId, ['restriction:view']);
    const viewer = await t.factories.member(org.orgId, { roles: [roleId] });
    const byViewer = { token: await t.factories.token(org.orgId, viewer), org: org.orgId };
    const res = await t.as(byViewer).op('createRestriction', { body: named({ effect: 'deny', applies_to: { everyone: true } }) });
    expectError(res, 403, 'missing_permission');
    expect((await t.as(byViewer).op('listRestrictions')).status).toBe(200);
  });
});

describe('listRestrictions and getRestriction', () => {
  let fresh: SeededOrg;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    fresh = await t.factories.org();
    const stoolId = await syntheticTool(fresh.orgId);
    ids.github = (
      await t
        .as(fresh)
        .op('createRestriction', { body: { name: 'a', effect: 'deny', match: { connector_slug: 'tickets-demo' }, applies_to: { everyone: true } } })
    ).body.id;
    ids.any = (
      await t
        .as(fresh)
        .op('createRestriction', { body: { name: 'b', effect: 'require_approval', match: { tool_pattern: 'x*' }, applies_to: { everyone: true } } })
    ).body.id;
    ids.stool = (
      await t
        .as(fresh)
        .op('createRestriction', { body: { name: 'c', effect: 'require_approval', match: { synthetic_tool_id: stoolId }, applies_to: { everyone: true } } })
    ).body.id;
    ids.inactive = (
      await t.as(fresh).op('createRestriction', {
        body: {
          name: 'd',
          effect: 'deny',
          match: { connector_slug: 'tickets-demo', tool_pattern: 'y' },
          applies_to: { everyone: true },
          is_active: false,
        },
      })
    ).body.id;
    ids.stoolId = stoolId;
  });

  it('pages oldest first', async () => {
    const first = await t.as(fresh).op('listRestrictions', { query: { limit: 3 } });
    expect(first.body.data.map((r: { id: string }) => r.id)).toEqual([ids.github, ids.any, ids.stool]);
    const second = await t.as(fresh).op('listRestrictions', { query: { limit: 3, cursor: first.body.next_cursor as string } });
    expect(second.body).toEqual({ data: [expect.objectContaining({ id: ids.inactive })], next_cursor: null });
  });

  it('filters by effect, connector, synthetic tool and is_active', async () => {
    const idsOf = async (query: ListQuery) => (await t.as(fresh).op('listRestrictions', { query })).body.data.map((r: { id: string }) => r.id);
    expect(await idsOf({ effect: 'deny' })).toEqual([ids.github, ids.inactive]);
    expect(await idsOf({ connector_slug: 'tickets-demo' })).toEqual([ids.github, ids.inactive]);
    expect(await idsOf({ synthetic_tool_id: ids.stoolId })).toEqual([ids.stool]);
    expect(await idsOf({ is_active: false })).toEqual([ids.inactive]);
    expect(await idsOf({ is_active: true, effect: 'require_approval' })).toEqual([ids.any, ids.stool]);
  });

  it('400 unknown_reference for a filter naming a connector the caller cannot see or a synthetic tool not of the organization', async () => {
    const res = await t.as(fresh).op('listRestrictions', { query: { connector_slug: 'no-such-connector', synthetic_tool_id: newId('syntheticTool') } });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors.map((e: { pointer: string }) => e.pointer)).toEqual(['/connector_slug', '/synthetic_tool_id']);
    // An unshared custom connector is invisible to a viewer without connector:manage.
    const hidden = await customConnector(t, fresh.orgId, { mcp_url: 'https://mcp.acme.example/mcp', auth: { type: 'none' }, share: false });
    const roleId = await t.factories.customRole(fresh.orgId, ['restriction:view']);
    const viewer = await t.factories.member(fresh.orgId, { roles: [roleId] });
    const v = { token: await t.factories.token(fresh.orgId, viewer), org: fresh.orgId };
    expect((await t.as(v).op('listRestrictions', { query: { connector_slug: hidden } })).error?.code).toBe('unknown_reference');
    expect((await t.as(fresh).op('listRestrictions', { query: { connector_slug: hidden } })).status).toBe(200);
  });

  it('gets one; 404 for another organization’s id and an unknown one', async () => {
    expect((await t.as(fresh).op('getRestriction', { params: { id: ids.github as string } })).body).toMatchObject({ id: ids.github, name: 'a' });
    const theirs = await t.as(org).op('getRestriction', { params: { id: ids.github as string } });
    expectError(theirs, 404, 'not_found');
    expect((await t.as(fresh).op('getRestriction', { params: { id: newId('restriction') } })).status).toBe(404);
  });

  it('a role, team or member that is gone drops out of applies_to', async () => {
    const roleId = await t.factories.customRole(fresh.orgId, []);
    const teamId = await t.factories.team(fresh.orgId, 'Gone');
    const userId = await t.factories.member(fresh.orgId);
    const created = await t
      .as(fresh)
      .op('createRestriction', { body: { name: 'drops', effect: 'deny', applies_to: { role_ids: [roleId], team_ids: [teamId], user_ids: [userId] } } });
    await t.db.deleteFrom('teams').where('id', '=', teamId).execute();
    await t.db.deleteFrom('role_assignments').where('role_id', '=', roleId).execute();
    await t.db.deleteFrom('roles').where('id', '=', roleId).execute();
    await t.db.updateTable('memberships').set({ status: 'removed' }).where('org_id', '=', fresh.orgId).where('user_id', '=', userId).execute();
    expect((await t.as(fresh).op('getRestriction', { params: { id: created.body.id } })).body.applies_to).toEqual({
      everyone: false,
      role_ids: [],
      team_ids: [],
      user_ids: [],
    });
  });
});

describe('updateRestriction', () => {
  it('changes what is sent; match and applies_to replace whole; audits the changed members; emits', async () => {
    const roleId = await t.factories.customRole(org.orgId, []);
    const created = await t.as(org).op('createRestriction', {
      body: named({ effect: 'require_approval', match: { connector_slug: 'tickets-demo', tool_pattern: 'delete_*' }, applies_to: { everyone: true } }),
    });
    const res = await t.as(org).op('updateRestriction', {
      params: { id: created.body.id },
      body: { match: { tool_pattern: 'delete_*' }, effect: 'deny', applies_to: { role_ids: [roleId] } },
    });
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
    const off = await t.as(org).op('updateRestriction', { params: { id: created.body.id }, body: { is_active: false, name: 'Renamed', description: null } });
    expect(off.body).toMatchObject({ is_active: false, name: 'Renamed', description: null, effect: 'deny' });
  });

  it('refuses bad shapes, unknown references, a taken name; 404 for another organization’s', async () => {
    const a = await t.as(org).op('createRestriction', { body: named({ effect: 'deny', applies_to: { everyone: true } }) });
    const b = await t.as(org).op('createRestriction', { body: named({ effect: 'deny', applies_to: { everyone: true } }) });
    expect(
      (await t.as(org).op('updateRestriction', { params: { id: b.body.id }, body: { applies_to: { everyone: true, user_ids: [org.ownerId] } } })).error?.code,
    ).toBe('validation_failed');
    expect((await t.as(org).op('updateRestriction', { params: { id: b.body.id }, body: { applies_to: { team_ids: [newId('team')] } } })).error?.code).toBe(
      'unknown_reference',
    );
    expect((await t.as(org).op('updateRestriction', { params: { id: b.body.id }, body: { match: { connector_slug: 'no-such' } } })).error?.code).toBe(
      'unknown_reference',
    );
    const taken = await t.as(org).op('updateRestriction', { params: { id: b.body.id }, body: { name: a.body.name } });
    expectError(taken, 409, 'name_taken');
    const empty = await t.as(org).patch(`/restriction/${b.body.id}`, {});
    expect([empty.status, empty.body.code]).toEqual([400, 'validation_failed']);
    const theirs = await t.as(other).op('updateRestriction', { params: { id: b.body.id }, body: { is_active: false } });
    expectError(theirs, 404, 'not_found');
  });
});

describe('deleteRestriction', () => {
  it('deletes, closes its pending access requests as denied by the system, keeps the rest readable', async () => {
    const memberId = await t.factories.member(org.orgId);
    const member = { token: await t.factories.token(org.orgId, memberId, PERMISSIONS), org: org.orgId };
    const created = await t
      .as(org)
      .op('createRestriction', { body: named({ effect: 'require_approval', match: { tool_pattern: 'delete_*' }, applies_to: { everyone: true } }) });
    const file = (body: { tool_name: string }) =>
      t.as(member).op('createAccessRequest', { body: { restriction_id: created.body.id, reason: 'Need it', ...body } });
    const pending1 = (await file({ tool_name: 'delete_a' })).body.id;
    const pending2 = (await file({ tool_name: 'delete_b' })).body.id;
    const withdrawn = (await file({ tool_name: 'delete_c' })).body.id;
    await t.as(member).op('withdrawAccessRequest', { params: { id: withdrawn } });

    const res = await t.as(org).op('deleteRestriction', { params: { id: created.body.id } });
    expect(res.status).toBe(204);
    expect((await t.as(org).op('getRestriction', { params: { id: created.body.id } })).status).toBe(404);
    const again = await t.as(org).op('deleteRestriction', { params: { id: created.body.id } });
    expectError(again, 404, 'not_found');

    for (const id of [pending1, pending2]) {
      const read = await t.as(org).op('getAccessRequest', { params: { id } });
      expect(read.body).toMatchObject({ status: 'denied', resolved_by_user_id: null, exception_expires_at: null });
      expect(read.body.resolved_at).not.toBeNull();
      expect(read.body.resolution_note).toEqual(expect.any(String));
    }
    expect((await t.as(org).op('getAccessRequest', { params: { id: withdrawn } })).body.status).toBe('withdrawn');
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
    const created = await t.as(org).op('createRestriction', { body: named({ effect: 'deny', applies_to: { everyone: true } }) });
    const res = await t.as(other).op('deleteRestriction', { params: { id: created.body.id } });
    expectError(res, 404, 'not_found');
    expect((await t.as(org).op('getRestriction', { params: { id: created.body.id } })).status).toBe(200);
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
