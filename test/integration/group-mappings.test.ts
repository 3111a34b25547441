import { randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { okta } from '../fixtures/scim/okta';

/*
 * Group mappings: a SCIM group's members hold a role and belong to a team while they are in
 * it. Grants are recorded by source: deleting a mapping, or leaving the group, takes away only
 * what no other mapping gives and what was not given directly. Escalation and last-Owner
 * guards apply; a role or team a mapping names cannot be deleted.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const unique = () => randomBytes(4).toString('hex');

async function setup() {
  const org = await t.factories.org();
  await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', org.orgId).execute();
  const session = await t.factories.session(org.ownerId);
  const token = (await t.call('POST', '/scim-token', { name: `IdP ${unique()}` }, { session, org: org.orgId })).body.token as string;
  const idp = (method: string, path: string, body?: unknown) =>
    t.call(method, path, body, { headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json' } });
  const users: string[] = [];
  for (let i = 0; i < 2; i += 1) {
    const n = unique();
    users.push(
      (await idp('POST', '/scim/v2/Users', okta.create({ userName: `p${n}@acme.example`, givenName: 'P', familyName: n, externalId: `00u${n}` }))).body.id,
    );
  }
  const group = (await idp('POST', '/scim/v2/Groups', { ...okta.createGroup(`Eng ${unique()}`), members: users.map((value) => ({ value })) })).body
    .id as string;
  const role = await t.factories.customRole(org.orgId, ['toolbox:view']);
  const team = await t.factories.team(org.orgId, `Team ${unique()}`);
  const admin = t.as({ token: org.token, org: org.orgId });
  const rolesOf = async (userId: string) =>
    (await t.db.selectFrom('role_assignments').select('role_id').where('org_id', '=', org.orgId).where('user_id', '=', userId).execute()).map((r) => r.role_id);
  const teamsOf = async (userId: string) =>
    (await t.db.selectFrom('team_members').select('team_id').where('org_id', '=', org.orgId).where('user_id', '=', userId).execute()).map((r) => r.team_id);
  return { org, idp, users, group, role, team, admin, rolesOf, teamsOf };
}

describe('group mappings', () => {
  it('grants the role and team to the group’s members at once, and withdraws only what no direct grant or other mapping gives', async () => {
    const { org, users, group, role, team, admin, rolesOf, teamsOf } = await setup();
    const [a, b] = users as [string, string];
    // a holds the role directly before any mapping.
    expect((await admin.patch(`/member/${a}`, { role_ids: [org.roleIds.member, role] })).status).toBe(200);

    const created = await admin.post('/group-mapping', { scim_group_id: group, role_id: role, team_id: team });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ scim_group_id: group, role_id: role, team_id: team, created_by_user_id: org.ownerId });
    expect(created.headers.get('location')).toBe(`/group-mapping/${created.body.id}`);
    expect(await rolesOf(b)).toContain(role);
    expect(await teamsOf(b)).toEqual([team]);
    expect(await teamsOf(a)).toEqual([team]);
    // A second mapping of the same group to the same role (without the team).
    const second = await admin.post('/group-mapping', { scim_group_id: group, role_id: role });
    expect(second.status).toBe(201);
    expectError(await admin.post('/group-mapping', { scim_group_id: group, role_id: role }), 409, 'conflict');
    expect((await admin.get(`/scim-group/${group}`)).body.mapping_ids).toEqual([created.body.id, second.body.id]);
    expect((await admin.get(`/group-mapping?role_id=${role}`)).body.data).toHaveLength(2);

    // Deleting the first: the team goes (only it gave it), the role stays (the second gives it).
    expect((await admin.delete(`/group-mapping/${created.body.id}`)).status).toBe(204);
    expect(await rolesOf(b)).toContain(role);
    expect(await teamsOf(b)).toEqual([]);
    // Deleting the second: b loses the role; a keeps it, given directly.
    expect((await admin.delete(`/group-mapping/${second.body.id}`)).status).toBe(204);
    expect(await rolesOf(b)).not.toContain(role);
    expect(await rolesOf(a)).toContain(role);
    expectError(await admin.get(`/group-mapping/${second.body.id}`), 404, 'not_found');
    expect(await t.factories.auditEntries(org.orgId, 'group_mapping.deleted')).toHaveLength(2);
  });

  it('keeps a team membership a person added directly after a mapping had given it, when the mapping goes', async () => {
    const { users, group, team, admin, teamsOf } = await setup();
    const [a, b] = users as [string, string];
    const mapping = await admin.post('/group-mapping', { scim_group_id: group, team_id: team });
    expect(mapping.status).toBe(201);
    expect(await teamsOf(a)).toEqual([team]);
    // An administrator adds a to the team by hand: from now on a's membership is theirs, not the mapping's.
    const added = await admin.post(`/team/${team}/members`, { user_id: a });
    expect([200, 201]).toContain(added.status);
    expect((await admin.delete(`/group-mapping/${mapping.body.id}`)).status).toBe(204);
    expect(await teamsOf(a)).toEqual([team]);
    expect(await teamsOf(b)).toEqual([]);
  });

  it('follows the identity provider: leaving the group withdraws, joining grants; updating moves the grant', async () => {
    const { idp, users, group, role, team, admin, rolesOf, teamsOf, org } = await setup();
    const [a, b] = users as [string, string];
    const mapping = (await admin.post('/group-mapping', { scim_group_id: group, role_id: role })).body.id as string;
    expect(await rolesOf(a)).toContain(role);
    expect((await idp('PATCH', `/scim/v2/Groups/${group}`, okta.removeMember(a))).status).toBe(200);
    expect(await rolesOf(a)).not.toContain(role);
    expect(await rolesOf(b)).toContain(role);
    expect((await idp('PATCH', `/scim/v2/Groups/${group}`, okta.addMembers([a]))).status).toBe(200);
    expect(await rolesOf(a)).toContain(role);

    const updated = await admin.patch(`/group-mapping/${mapping}`, { role_id: null, team_id: team });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ role_id: null, team_id: team });
    expect(await rolesOf(a)).toEqual([org.roleIds.member]);
    expect(await teamsOf(a)).toEqual([team]);
    expectError(await admin.patch(`/group-mapping/${mapping}`, { team_id: null }), 400, 'validation_failed');
    const otherGroup = (await idp('POST', '/scim/v2/Groups', okta.createGroup(`Other ${unique()}`))).body.id;
    expectError(await admin.patch(`/group-mapping/${mapping}`, { scim_group_id: otherGroup }), 400, 'immutable_field');

    // Deleting the SCIM group deletes its mappings and withdraws what they gave.
    expect((await idp('DELETE', `/scim/v2/Groups/${group}`)).status).toBe(204);
    expect(await teamsOf(a)).toEqual([]);
    expectError(await admin.get(`/group-mapping/${mapping}`), 404, 'not_found');
  });

  it('refuses roles and teams in use, foreign references, escalation, and the plan without scim', async () => {
    const { org, group, role, team, admin } = await setup();
    expect((await admin.post('/group-mapping', { scim_group_id: group, role_id: role, team_id: team })).status).toBe(201);
    expectError(await admin.delete(`/role/${role}`), 409, 'role_in_use');
    expectError(await admin.delete(`/team/${team}`), 409, 'team_in_use');

    const other = await setup();
    expectError(await admin.post('/group-mapping', { scim_group_id: other.group, role_id: role }), 400, 'unknown_reference');
    expectError(await admin.post('/group-mapping', { scim_group_id: group, role_id: other.role }), 400, 'unknown_reference');
    expectError(await admin.post('/group-mapping', { scim_group_id: group }), 400, 'validation_failed');
    expectError(await other.admin.get(`/group-mapping?scim_group_id=${group}`), 400, 'unknown_reference');

    // An Admin may not map a group to Owner.
    const adminId = await t.factories.member(org.orgId, { roles: ['admin'] });
    const asAdmin = t.as({ token: await t.factories.token(org.orgId, adminId), org: org.orgId });
    expectError(await asAdmin.post('/group-mapping', { scim_group_id: group, role_id: org.roleIds.owner }), 403, 'permission_escalation');

    await t.db.updateTable('organizations').set({ plan: 'free' }).where('id', '=', org.orgId).execute();
    expectError(await admin.post('/group-mapping', { scim_group_id: group, role_id: org.roleIds.member }), 403, 'entitlement_exceeded');
  });

  it('never takes the Owner role from the last active Owner (409 last_owner), by mapping or by SCIM', async () => {
    const { org, idp, users, group, admin, rolesOf } = await setup();
    const [a] = users as [string, string];
    const mapping = (await admin.post('/group-mapping', { scim_group_id: group, role_id: org.roleIds.owner })).body.id as string;
    expect(await rolesOf(a)).toContain(org.roleIds.owner);
    // The original Owner steps down; the mapped Owners are the only ones.
    const asA = t.as({ token: await t.factories.token(org.orgId, a), org: org.orgId });
    expect((await asA.patch(`/member/${org.ownerId}`, { role_ids: [org.roleIds.member] })).status).toBe(200);
    // b leaves the group: fine, a remains Owner.
    expect((await idp('PATCH', `/scim/v2/Groups/${group}`, okta.removeMember(users[1]!))).status).toBe(200);
    // a leaving would leave no Owner: SCIM 409, nothing changes.
    const refused = await idp('PATCH', `/scim/v2/Groups/${group}`, okta.removeMember(a));
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'], status: '409' });
    expect(await rolesOf(a)).toContain(org.roleIds.owner);
    expectError(await asA.delete(`/group-mapping/${mapping}`), 409, 'last_owner');
    expect(await rolesOf(a)).toContain(org.roleIds.owner);
  });

  it('needs group_mapping permissions and a credential; walks every page once; emits member.roles_updated and the SCIM events', async () => {
    const { org, group, role, team, admin } = await setup();
    const plain = t.as({
      token: await t.factories.token(org.orgId, await t.factories.member(org.orgId, { roles: ['member'] }), ['organization:view']),
      org: org.orgId,
    });
    expectError(await plain.post('/group-mapping', { scim_group_id: group, role_id: role }), 403, 'missing_permission');
    expectError(await plain.get('/group-mapping'), 403, 'missing_permission');
    expectError(await plain.get('/scim-group'), 403, 'missing_permission');
    expectError(await t.call('GET', '/group-mapping', undefined, { org: org.orgId }), 401, 'unauthenticated');

    const ids = [
      (await admin.post('/group-mapping', { scim_group_id: group, role_id: role })).body.id,
      (await admin.post('/group-mapping', { scim_group_id: group, team_id: team })).body.id,
      (await admin.post('/group-mapping', { scim_group_id: group, role_id: role, team_id: team })).body.id,
    ];
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { body: { data: { id: string }[]; next_cursor: string | null } } = await admin.get(
        `/group-mapping?limit=2${cursor ? `&cursor=${cursor}` : ''}`,
      );
      seen.push(...page.body.data.map((m) => m.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual(ids);

    const events = async (type: string) =>
      (await t.db.selectFrom('outbox').select('payload').where('org_id', '=', org.orgId).where('event_type', '=', type).execute()).map(
        (e) => e.payload as Record<string, unknown>,
      );
    // Two SCIM-created people joined; both got the role through the first mapping.
    expect(await events('member.joined')).toHaveLength(2);
    const updated = await events('member.roles_updated');
    expect(updated).toHaveLength(2);
    expect(updated[0]).toMatchObject({ role_ids: expect.arrayContaining([role]), previous_role_ids: [org.roleIds.member] });
    const [entry] = await t.factories.auditEntries(org.orgId, 'group_mapping.created');
    expect(entry).toMatchObject({ actor_type: 'api_token', target_type: 'group_mapping' });
  });
});
