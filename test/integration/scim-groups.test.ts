import { randomBytes } from 'node:crypto';
import { scimPatch, type ScimPatchOperation } from 'scim-patch';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { entra } from '../fixtures/scim/entra';
import { okta } from '../fixtures/scim/okta';

/*
 * /scim/v2/Groups as Okta's group push and Entra's group provisioning drive it (fixtures in
 * test/fixtures/scim), membership changes checked against scim-patch, and the administrators'
 * read-only view of the same groups (/scim-group).
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';
const unique = () => randomBytes(4).toString('hex');

async function provisioned() {
  const org = await t.factories.org();
  await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', org.orgId).execute();
  const session = await t.factories.session(org.ownerId);
  const token = (await t.call('POST', '/scim-token', { name: `IdP ${unique()}` }, { session, org: org.orgId })).body.token as string;
  const idp = {
    get: (path: string) => t.call('GET', path, undefined, { headers: { authorization: `Bearer ${token}` } }),
    send: (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
      t.call(method, path, body, { headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json', ...headers } }),
  };
  const users: string[] = [];
  for (let i = 0; i < 3; i += 1) {
    const n = unique();
    const res = await idp.send('POST', '/scim/v2/Users', okta.create({ userName: `p${n}@acme.example`, givenName: 'P', familyName: n, externalId: `00u${n}` }));
    users.push(res.body.id);
  }
  return { org, idp, users, admin: t.as({ token: org.token, org: org.orgId }) };
}

// Members are a set (RFC 7643 §2.4: multi-valued attributes are unordered): compared sorted.
const memberIds = (group: { members?: { value: string }[] }) => (group.members ?? []).map((m) => m.value).sort();
/**
 * What scim-patch makes of the group. It matches values to remove by deep equality, so the
 * members in the operations are reduced to their `value` as the resource holds them (Entra
 * sends `$ref: null` beside it).
 */
function oracle(group: Record<string, unknown>, operations: unknown[]) {
  const resource = {
    schemas: group.schemas,
    displayName: group.displayName,
    members: ((group.members as { value: string }[]) ?? []).map((m) => ({ value: m.value })),
  };
  const ops = (operations as { value?: unknown }[]).map((op) =>
    Array.isArray(op.value) ? { ...op, value: (op.value as { value: string }[]).map((m) => ({ value: m.value })) } : op,
  );
  const patched = scimPatch(resource as never, ops as ScimPatchOperation[]) as { displayName: string; members?: { value: string }[] };
  return { displayName: patched.displayName, members: (patched.members ?? []).map((m) => m.value).sort() };
}

describe('group mappings follow PUT and DELETE of a group', () => {
  it('replacing the members or deleting the group changes the roles the mapping gave (member.roles_updated)', async () => {
    const { org, idp, users, admin } = await provisioned();
    const [a, b] = users as [string, string, string];
    const group = await idp.send('POST', '/scim/v2/Groups', { ...okta.createGroup(`Ops ${unique()}`), members: [{ value: a }] });
    expect(group.status).toBe(201);
    const role = await t.factories.customRole(org.orgId, ['toolbox:view']);
    expect((await admin.post('/group-mapping', { scim_group_id: group.body.id, role_id: role })).status).toBe(201);
    const rolesOf = async (userId: string) =>
      (await t.db.selectFrom('role_assignments').select('role_id').where('org_id', '=', org.orgId).where('user_id', '=', userId).execute()).map(
        (r) => r.role_id,
      );
    expect(await rolesOf(a)).toContain(role);
    const replaced = await idp.send('PUT', `/scim/v2/Groups/${group.body.id}`, { ...group.body, members: [{ value: b }] });
    expect(replaced.status).toBe(200);
    expect(await rolesOf(a)).not.toContain(role);
    expect(await rolesOf(b)).toContain(role);
    expect((await idp.send('DELETE', `/scim/v2/Groups/${group.body.id}`)).status).toBe(204);
    expect(await rolesOf(b)).not.toContain(role);
    const updated = await t.db
      .selectFrom('outbox')
      .select('payload')
      .where('org_id', '=', org.orgId)
      .where('event_type', '=', 'member.roles_updated')
      .execute();
    expect(updated.length).toBeGreaterThanOrEqual(4);
  });
});

describe('Okta group push', () => {
  it('replays Okta: create, rename with id in the value, add members, remove one by filter, replace all, delete', async () => {
    const { org, idp, users, admin } = await provisioned();
    const created = await idp.send('POST', '/scim/v2/Groups', okta.createGroup('Engineering'));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    expect(created.body).toMatchObject({ displayName: 'Engineering', members: [], meta: { resourceType: 'Group', location: `${t.url}/scim/v2/Groups/${id}` } });
    expect(created.headers.get('etag')).toBe(created.body.meta.version);
    expect((await idp.send('POST', '/scim/v2/Groups', okta.createGroup('engineering'))).body).toMatchObject({ status: '409', scimType: 'uniqueness' });

    const steps: [string, unknown][] = [
      ['rename', okta.renameGroup(id, 'Platform')],
      ['add members', okta.addMembers(users)],
      ['remove one member', okta.removeMember(users[1]!)],
      ['replace members', okta.replaceMembers([users[2]!, users[0]!])],
    ];
    for (const [step, body] of steps) {
      const before = (await idp.get(`/scim/v2/Groups/${id}`)).body;
      const res = await idp.send('PATCH', `/scim/v2/Groups/${id}`, body, { 'if-match': before.meta.version });
      expect([step, res.status]).toEqual([step, 200]);
      expect([step, { displayName: res.body.displayName, members: memberIds(res.body) }]).toEqual([
        step,
        oracle(before, (body as { Operations: unknown[] }).Operations),
      ]);
    }
    const final = (await idp.get(`/scim/v2/Groups/${id}`)).body;
    expect(final.members).toEqual(
      expect.arrayContaining([expect.objectContaining({ value: users[0], type: 'User' }), expect.objectContaining({ value: users[2], type: 'User' })]),
    );
    // The user shows the group; the administrators see it too.
    expect((await idp.get(`/scim/v2/Users/${users[0]}`)).body.groups).toEqual([{ value: id, display: 'Platform' }]);
    const listed = await admin.get('/scim-group');
    expect(listed.body.data).toEqual([expect.objectContaining({ id, display_name: 'Platform', external_id: null, member_count: 2, mapping_ids: [] })]);
    expect((await admin.get(`/scim-group?user_id=${users[1]}`)).body.data).toEqual([]);
    expect((await admin.get('/scim-group?q=plat')).body.data).toHaveLength(1);
    expect((await admin.get('/scim-group?mapped=true')).body.data).toEqual([]);
    expect((await admin.get(`/scim-group/${id}`)).body.id).toBe(id);

    const deleted = await idp.send('DELETE', `/scim/v2/Groups/${id}`);
    expect(deleted.status).toBe(204);
    expect((await idp.get(`/scim/v2/Groups/${id}`)).status).toBe(404);
    expectError(await admin.get(`/scim-group/${id}`), 404, 'not_found');
    expect(await t.factories.auditEntries(org.orgId, 'scim_group.updated')).toHaveLength(4);
  });
});

describe('Entra group provisioning', () => {
  it('replays Entra: create with externalId, probe with excludedAttributes=members, Add and Remove with value arrays, rename', async () => {
    const { idp, users } = await provisioned();
    const created = await idp.send('POST', '/scim/v2/Groups', entra.createGroup(`ext-${unique()}`, 'Sales'));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const probe = await idp.get(entra.probeGroup('sales'));
    expect(probe.body.totalResults).toBe(1);
    expect(probe.body.Resources[0].members).toBeUndefined();
    for (const body of [entra.addMember(users[0]!), entra.addMember(users[1]!), entra.removeMember(users[0]!), entra.renameGroup('Sales EMEA')]) {
      const before = (await idp.get(`/scim/v2/Groups/${id}`)).body;
      const res = await idp.send('PATCH', `/scim/v2/Groups/${id}`, body);
      expect(res.status).toBe(200);
      expect({ displayName: res.body.displayName, members: memberIds(res.body) }).toEqual(oracle(before, body.Operations));
    }
    const byMember = await idp.get(`/scim/v2/Groups?filter=${encodeURIComponent(`members[value eq "${users[1]}"]`)}`);
    expect(byMember.body.Resources.map((g: { id: string }) => g.id)).toEqual([id]);
    const byMemberValue = await idp.get(`/scim/v2/Groups?filter=${encodeURIComponent(`members.value eq "${users[0]}"`)}`);
    expect(byMemberValue.body.totalResults).toBe(0);
  });

  it('refuses members who are not people of the organization (invalidValue), atomically; random ids are 404; PUT replaces', async () => {
    const { idp, users } = await provisioned();
    const other = await provisioned();
    const id = (await idp.send('POST', '/scim/v2/Groups', okta.createGroup('Ops'))).body.id as string;
    const bad = await idp.send('PATCH', `/scim/v2/Groups/${id}`, {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [
        { op: 'add', path: 'members', value: [{ value: users[0] }] },
        { op: 'add', path: 'members', value: [{ value: other.users[0] }] },
      ],
    });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ schemas: [ERROR], scimType: 'invalidValue' });
    expect((await idp.get(`/scim/v2/Groups/${id}`)).body.members).toEqual([]);
    expect((await idp.get('/scim/v2/Groups/not-a-group-id')).status).toBe(404);
    expect((await other.idp.get(`/scim/v2/Groups/${id}`)).status).toBe(404);
    const put = await idp.send('PUT', `/scim/v2/Groups/${id}`, {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
      displayName: 'Ops 2',
      members: [{ value: users[1] }],
    });
    expect(put.status).toBe(200);
    expect({ displayName: put.body.displayName, members: memberIds(put.body) }).toEqual({ displayName: 'Ops 2', members: [users[1]] });
    const stale = await idp.send('DELETE', `/scim/v2/Groups/${id}`, undefined, { 'if-match': 'W/"old"' });
    expect(stale.status).toBe(412);
  });
});
