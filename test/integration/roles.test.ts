import type { components } from '../../generated/openapi';
import { PERMISSIONS, SYSTEM_ROLES } from '../../src/identity/permissions';
import { newId } from '../../src/lib/ids';
import { settle, startTestApp, type ApiClient, type TestApp } from '../support/app';
import { webhookSubscription } from '../support/event-delivery';
import type { SeededOrg } from '../support/factories';
import { usePeers } from '../support/peers';
import { invite } from '../fixtures/invites';
import { restriction } from '../fixtures/restrictions';

/*
 * The five Roles operations over HTTP against the real app on a fresh database; every
 * response is checked against the spec. Events go end to end to a webhook receiver on loopback.
 */

type Schemas = components['schemas'];
const ROLE = /^role_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

const peers = usePeers();
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
    list: (query: { limit?: number; cursor?: string; is_system?: boolean } = {}) => settle(c.GET('/role', { params: { query } })),
    create: (body: Schemas['RoleCreate']) => settle(c.POST('/role', { body })),
    read: (id: string) => settle(c.GET('/role/{id}', item(id))),
    update: (id: string, body: Schemas['RoleUpdate']) => settle(c.PATCH('/role/{id}', { ...item(id), body })),
    remove: (id: string) => settle(c.DELETE('/role/{id}', item(id))),
  };
}
const owner = () => api({ token: org.token, org: org.orgId });
let n = 0;
const name = () => `Role ${++n} ${Math.random().toString(36).slice(2, 6)}`;

/** A member holding a custom role with these permissions, and an API token of theirs. */
async function holder(permissions: string[], orgOf: SeededOrg = org) {
  const roleId = await t.factories.customRole(orgOf.orgId, permissions);
  const userId = await t.factories.member(orgOf.orgId, { roles: [roleId] });
  const token = await t.factories.token(orgOf.orgId, userId);
  return { roleId, userId, token, api: api({ token, org: orgOf.orgId }) };
}

describe('listRoles', () => {
  it('lists the five system roles first, with their catalog permissions, then custom roles', async () => {
    const seeded = await t.factories.org();
    const as = api({ token: seeded.token, org: seeded.orgId });
    const custom = await as.create({ name: 'Maintainer', permissions: ['connector:view', 'connector:manage'] });
    expect(custom.status).toBe(201);
    const res = await as.list();
    expect(res.status).toBe(200);
    expect(res.body.data.map((r: Schemas['Role']) => r.system_key)).toEqual(['owner', 'admin', 'member', 'billing_admin', 'auditor', null]);
    const ownerRole = res.body.data[0];
    expect(ownerRole).toMatchObject({ name: 'Owner', is_system: true, seat_class: 'billable', member_count: 1, created_by_user_id: null });
    expect(ownerRole.permissions).toEqual([...PERMISSIONS].sort());
    const billing = res.body.data[3];
    expect(billing.permissions).toEqual([...SYSTEM_ROLES.find((r) => r.key === 'billing_admin')!.permissions].sort());
    expect(billing.seat_class).toBe('free_admin');
    expect(res.body.data[5]).toMatchObject({ id: custom.body.id, permissions: ['connector:manage', 'connector:view'], is_system: false, member_count: 0 });
    expect(res.body.next_cursor).toBeNull();

    expect((await as.list({ is_system: false })).body.data.map((r: Schemas['Role']) => r.id)).toEqual([custom.body.id]);
    expect((await as.list({ is_system: true })).body.data).toHaveLength(5);
  });

  it('walks every page once', async () => {
    const seeded = await t.factories.org();
    for (let i = 0; i < 6; i++) await t.factories.customRole(seeded.orgId, ['member:view'], `Walk ${i}`);
    const as = api({ token: seeded.token, org: seeded.orgId });
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const res = await as.list({ limit: 4, cursor });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((r: Schemas['Role']) => r.id));
      cursor = res.body.next_cursor ?? undefined;
      pages += 1;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toHaveLength(11);
    expect(new Set(seen).size).toBe(11);
    expect([...seen].sort()).toEqual(seen);
  });

  it('400 for a bad limit, an unknown parameter or a cursor of another list; 401; 403 missing_permission', async () => {
    expect((await owner().raw.get('/role?limit=0')).body.code).toBe('validation_failed');
    expect((await owner().raw.get('/role?limit=abc')).body.code).toBe('validation_failed');
    expect((await owner().raw.get('/role?colour=red')).body.code).toBe('validation_failed');
    const teamCursor = Buffer.from(newId('team')).toString('base64url');
    expect((await owner().raw.get(`/role?cursor=${teamCursor}`)).body.code).toBe('invalid_cursor');
    const anonymous = await t.as({ org: org.orgId }).get('/role');
    expect([anonymous.status, anonymous.body.code]).toEqual([401, 'unauthenticated']);
    const nobody = await holder(['member:view']);
    expect([(await nobody.api.list()).status, (await nobody.api.list()).body.code]).toEqual([403, 'missing_permission']);
  });
});

describe('createRole', () => {
  it('creates a custom role (billable seat, sorted permissions), 201 with Location, audit entry and role.created', async () => {
    const res = await owner().create({
      name: 'Connector maintainer',
      description: 'Maintains connectors.',
      permissions: ['toolbox:view', 'connector:manage', 'connector:view'],
    });
    expect(res.status).toBe(201);
    expect(res.body.id).toMatch(ROLE);
    expect(res.headers.get('location')).toBe(`/role/${res.body.id}`);
    expect(res.body).toMatchObject({
      name: 'Connector maintainer',
      description: 'Maintains connectors.',
      permissions: ['connector:manage', 'connector:view', 'toolbox:view'],
      is_system: false,
      system_key: null,
      seat_class: 'billable',
      member_count: 0,
      created_by_user_id: org.ownerId,
    });
    const [audit] = (await t.factories.auditEntries(org.orgId, 'role.created')).filter((a) => a.target_id === res.body.id);
    expect(audit).toMatchObject({ target_type: 'role', actor_type: 'api_token', actor_user_id: org.ownerId });
    expect(audit!.changes).toMatchObject({ name: 'Connector maintainer', permissions: ['connector:manage', 'connector:view', 'toolbox:view'] });
  });

  it('400 validation_failed: missing, wrong type, unknown member, a permission not in the catalog, empty permissions', async () => {
    for (const body of [
      { permissions: ['member:view'] },
      { name: 'X' },
      { name: 42, permissions: ['member:view'] },
      { name: 'X', permissions: ['member:view'], colour: 'red' },
      { name: 'X', permissions: ['member:fly'] },
      { name: 'X', permissions: [] },
      { name: '   ', permissions: ['member:view'] },
      { name: 'X', permissions: ['member:view'], is_system: true },
    ]) {
      const res = await owner().raw.post('/role', body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
    }
  });

  it('409 name_taken, compared without regard to case and including system roles; another organization may use it', async () => {
    await owner().create({ name: 'Reviewers', permissions: ['member:view'] });
    for (const taken of ['Reviewers', 'REVIEWERS', 'owner', 'Billing Admin']) {
      const res = await owner().create({ name: taken, permissions: ['member:view'] });
      expect([res.status, res.body.code]).toEqual([409, 'name_taken']);
    }
    expect((await api({ token: other.token, org: other.orgId }).create({ name: 'Reviewers', permissions: ['member:view'] })).status).toBe(201);
  });

  it('403 permission_escalation for a permission the caller does not hold; also through a narrower token', async () => {
    const manager = await holder(['role:manage', 'role:view', 'member:view']);
    const res = await manager.api.create({ name: name(), permissions: ['member:view', 'billing:manage'] });
    expect([res.status, res.body.code]).toEqual([403, 'permission_escalation']);
    expect(res.body.detail).toContain('billing:manage');
    expect((await manager.api.create({ name: name(), permissions: ['member:view'] })).status).toBe(201);
    // The owner's token limited to role:manage holds nothing else.
    const narrow = api({ token: await t.factories.token(org.orgId, org.ownerId, ['role:manage']), org: org.orgId });
    expect((await narrow.create({ name: name(), permissions: ['member:view'] })).body.code).toBe('permission_escalation');
  });

  it('403 missing_permission without role:manage', async () => {
    const viewer = await holder(['role:view']);
    const res = await viewer.api.create({ name: name(), permissions: ['role:view'] });
    expect([res.status, res.body.code]).toEqual([403, 'missing_permission']);
  });

  it('a session creates one too', async () => {
    const session = await t.factories.session(org.ownerId);
    const res = await api({ session, org: org.orgId }).create({ name: name(), permissions: ['team:view'] });
    expect(res.status).toBe(201);
    expect(res.body.created_by_user_id).toBe(org.ownerId);
    const [audit] = (await t.factories.auditEntries(org.orgId, 'role.created')).filter((a) => a.target_id === res.body.id);
    expect(audit).toMatchObject({ actor_type: 'user', actor_id: org.ownerId });
  });
});

describe('getRole', () => {
  it('answers a system or custom role with its member count', async () => {
    const h = await holder(['team:view']);
    await t.factories.member(org.orgId, { roles: [h.roleId] });
    const res = await owner().read(h.roleId);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: h.roleId, member_count: 2, permissions: ['team:view'], is_system: false });
    const member = await owner().read(org.roleIds.member);
    expect(member.body).toMatchObject({ name: 'Member', system_key: 'member', is_system: true });
  });

  it('400 for an id that is not a role id; 404 for an unknown id and for another organization’s role', async () => {
    expect((await owner().raw.get('/role/team_01jg3b7f0p3m6q9x2v5c8n1b4k')).body.code).toBe('validation_failed');
    expect((await owner().read(newId('role'))).status).toBe(404);
    const theirs = await t.factories.customRole(other.orgId, ['member:view']);
    const res = await owner().read(theirs);
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await owner().read(other.roleIds.owner)).status).toBe(404);
  });

  it('403 missing_permission without role:view', async () => {
    const h = await holder(['member:view']);
    expect((await h.api.read(h.roleId)).body.code).toBe('missing_permission');
  });
});

describe('updateRole', () => {
  it('renames, clears the description and replaces permissions; audit with each change from and to; role.updated', async () => {
    const created = (await owner().create({ name: name(), description: 'Old', permissions: ['connector:view'] })).body;
    const res = await owner().update(created.id, { name: 'Connector owner', description: null, permissions: ['connector:view', 'connector:manage'] });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: created.id, name: 'Connector owner', description: null, permissions: ['connector:manage', 'connector:view'] });
    const [audit] = (await t.factories.auditEntries(org.orgId, 'role.updated')).filter((a) => a.target_id === created.id);
    expect(audit!.changes).toEqual({
      name: { from: created.name, to: 'Connector owner' },
      description: { from: 'Old', to: null },
      permissions: { from: ['connector:view'], to: ['connector:manage', 'connector:view'] },
    });
  });

  it('a role change reaches the next request of its holders’ tokens and sessions', async () => {
    const h = await holder(['member:view']);
    const session = await t.factories.session(h.userId);
    const bySession = api({ session, org: org.orgId });
    expect((await h.api.list()).body.code).toBe('missing_permission');
    expect((await bySession.list()).body.code).toBe('missing_permission');
    expect((await owner().update(h.roleId, { permissions: ['member:view', 'role:view'] })).status).toBe(200);
    expect((await h.api.list()).status).toBe(200);
    expect((await bySession.list()).status).toBe(200);
    expect((await owner().update(h.roleId, { permissions: ['member:view'] })).status).toBe(200);
    expect((await h.api.list()).body.code).toBe('missing_permission');
    expect((await bySession.list()).body.code).toBe('missing_permission');
  });

  it('403 permission_escalation when adding what the caller lacks; taking away is always allowed', async () => {
    const manager = await holder(['role:manage', 'role:view']);
    const target = await t.factories.customRole(org.orgId, ['billing:view', 'role:view']);
    const add = await manager.api.update(target, { permissions: ['billing:view', 'role:view', 'billing:manage'] });
    expect([add.status, add.body.code]).toEqual([403, 'permission_escalation']);
    // billing:view is not the manager's, but it is already in the role: removing role:view is fine.
    const take = await manager.api.update(target, { permissions: ['billing:view'] });
    expect(take.status).toBe(200);
    expect(take.body.permissions).toEqual(['billing:view']);
  });

  it('409 system_role_immutable for a system role; 409 name_taken', async () => {
    const res = await owner().update(org.roleIds.member, { name: 'Everyone' });
    expect([res.status, res.body.code]).toEqual([409, 'system_role_immutable']);
    const a = (await owner().create({ name: name(), permissions: ['team:view'] })).body;
    const b = (await owner().create({ name: name(), permissions: ['team:view'] })).body;
    const clash = await owner().update(b.id, { name: a.name.toUpperCase() });
    expect([clash.status, clash.body.code]).toEqual([409, 'name_taken']);
    expect((await owner().update(b.id, { name: 'Admin' })).body.code).toBe('name_taken');
  });

  it('400 validation_failed (empty body, immutable members, wrong types); 404 for another organization’s role, unchanged', async () => {
    const mine = await t.factories.customRole(org.orgId, ['team:view']);
    for (const body of [{}, { seat_class: 'free_admin' }, { is_system: true }, { permissions: 'team:view' }, { name: '' }, { permissions: [] }]) {
      expect((await owner().raw.patch(`/role/${mine}`, body)).body.code).toBe('validation_failed');
    }
    const theirs = await t.factories.customRole(other.orgId, ['team:view'], 'Theirs');
    const res = await owner().update(theirs, { name: 'Mine now' });
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await api({ token: other.token, org: other.orgId }).read(theirs)).body.name).toBe('Theirs');
  });

  it('403 missing_permission without role:manage', async () => {
    const h = await holder(['role:view']);
    expect((await h.api.update(h.roleId, { name: name() })).body.code).toBe('missing_permission');
  });
});

describe('deleteRole', () => {
  it('deletes an unused custom role: 204, audit entry, role.deleted; then 404', async () => {
    const id = (await owner().create({ name: name(), permissions: ['team:view'] })).body.id;
    const res = await owner().remove(id);
    expect(res.status).toBe(204);
    const [audit] = (await t.factories.auditEntries(org.orgId, 'role.deleted')).filter((a) => a.target_id === id);
    expect(audit).toMatchObject({ target_type: 'role' });
    expect((await owner().read(id)).status).toBe(404);
    expect((await owner().remove(id)).status).toBe(404);
  });

  it('409 role_in_use while a member holds it or a restriction names it', async () => {
    const h = await holder(['team:view']);
    const held = await owner().remove(h.roleId);
    expect([held.status, held.body.code]).toEqual([409, 'role_in_use']);
    expect(held.body.detail).toContain('1 member');
    const named = await t.factories.customRole(org.orgId, ['team:view']);
    const rst = await restriction(t, org, { applies_to: { role_ids: [named] } });
    const res = await owner().remove(named);
    expect([res.status, res.body.code]).toEqual([409, 'role_in_use']);
    expect(res.body.detail).toContain(rst);
    expect((await owner().read(named)).status).toBe(200);
  });

  it('409 role_in_use while a pending invite would grant it or a domain gives it to those who join', async () => {
    const named = await t.factories.customRole(org.orgId, ['team:view']);
    const inviteId = await invite(t, org, { role_ids: [named] });
    const byInvite = await owner().remove(named);
    expect([byInvite.status, byInvite.body.code]).toEqual([409, 'role_in_use']);
    expect(byInvite.body.detail).toContain('1 pending invite');
    expect((await t.as({ token: org.token, org: org.orgId }).post(`/invite/${inviteId}/revoke`)).status).toBe(200);

    const domain = await t
      .as({ token: org.token, org: org.orgId })
      .post('/org-domain', { domain: `roles-${newId('role').slice(-8)}.example`, default_role_id: named });
    expect(domain.status).toBe(201);
    const byDomain = await owner().remove(named);
    expect([byDomain.status, byDomain.body.code]).toEqual([409, 'role_in_use']);
    expect(byDomain.body.detail).toContain('organization domain');
    expect((await t.as({ token: org.token, org: org.orgId }).delete(`/org-domain/${domain.body.id}`)).status).toBe(204);
    expect((await owner().remove(named)).status).toBe(204);
  });

  it('409 system_role_immutable; 404 for another organization’s role, which stays', async () => {
    expect((await owner().remove(org.roleIds.auditor)).body.code).toBe('system_role_immutable');
    const theirs = await t.factories.customRole(other.orgId, ['team:view']);
    expect((await owner().remove(theirs)).status).toBe(404);
    expect((await api({ token: other.token, org: other.orgId }).read(theirs)).status).toBe(200);
  });

  it('400 for a malformed id; 403 missing_permission', async () => {
    expect((await owner().raw.delete('/role/nope')).body.code).toBe('validation_failed');
    const h = await holder(['role:view']);
    const id = await t.factories.customRole(org.orgId, ['team:view']);
    expect((await h.api.remove(id)).body.code).toBe('missing_permission');
  });
});

describe('role events, end to end to a webhook receiver', () => {
  it('role.created, role.updated and role.deleted arrive with their data', async () => {
    const seeded = await t.factories.org();
    const hook = await webhookSubscription(t, peers.receiver, seeded, ['role.created', 'role.updated', 'role.deleted']);
    const as = api({ token: seeded.token, org: seeded.orgId });
    const id = (await as.create({ name: 'Support', permissions: ['member:view'] })).body.id;
    await as.update(id, { permissions: ['member:view', 'team:view'] });
    await as.update(id, { description: 'Same permissions' });
    await as.remove(id);
    expect(await hook.deliver()).toEqual([
      { type: 'role.created', data: { role: { id, name: 'Support', permissions: ['member:view'] } } },
      { type: 'role.updated', data: { role: { id, name: 'Support', permissions: ['member:view', 'team:view'] }, changed: ['permissions'] } },
      { type: 'role.updated', data: { role: { id, name: 'Support', permissions: ['member:view', 'team:view'] }, changed: ['description'] } },
      { type: 'role.deleted', data: { role: { id, name: 'Support', permissions: ['member:view', 'team:view'] } } },
    ]);
  });

  it('an update that changes nothing emits nothing', async () => {
    const seeded = await t.factories.org();
    const hook = await webhookSubscription(t, peers.receiver, seeded, ['role.updated']);
    const as = api({ token: seeded.token, org: seeded.orgId });
    const id = (await as.create({ name: 'Quiet', permissions: ['member:view'] })).body.id;
    expect((await as.update(id, { name: 'Quiet', permissions: ['member:view'] })).status).toBe(200);
    expect(await hook.deliver()).toEqual([]);
  });
});
