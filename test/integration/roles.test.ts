import type { components } from '../../generated/openapi';
import { PERMISSIONS, SYSTEM_ROLES } from '../../src/identity/permissions';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
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

let n = 0;
const name = () => `Role ${++n} ${Math.random().toString(36).slice(2, 6)}`;

/** A member holding a custom role with these permissions, with an API token of theirs: a caller. */
async function holder(permissions: string[], orgOf: SeededOrg = org) {
  const roleId = await t.factories.customRole(orgOf.orgId, permissions);
  const userId = await t.factories.member(orgOf.orgId, { roles: [roleId] });
  const token = await t.factories.token(orgOf.orgId, userId);
  return { roleId, userId, token, org: orgOf.orgId };
}

describe('listRoles', () => {
  it('lists the five system roles first, with their catalog permissions, then custom roles', async () => {
    const seeded = await t.factories.org();
    const custom = await t.as(seeded).op('createRole', { body: { name: 'Maintainer', permissions: ['connector:view', 'connector:manage'] } });
    expect(custom.status).toBe(201);
    const res = await t.as(seeded).op('listRoles');
    expect(res.status).toBe(200);
    expect(res.body.data.map((r: Schemas['Role']) => r.system_key)).toEqual(['owner', 'admin', 'member', 'billing_admin', 'auditor', null]);
    const ownerRole = res.body.data[0]!;
    expect(ownerRole).toMatchObject({ name: 'Owner', is_system: true, seat_class: 'billable', member_count: 1, created_by_user_id: null });
    expect(ownerRole.permissions).toEqual([...PERMISSIONS].sort());
    const billing = res.body.data[3]!;
    expect(billing.permissions).toEqual([...SYSTEM_ROLES.find((r) => r.key === 'billing_admin')!.permissions].sort());
    expect(billing.seat_class).toBe('free_admin');
    expect(res.body.data[5]).toMatchObject({ id: custom.body.id, permissions: ['connector:manage', 'connector:view'], is_system: false, member_count: 0 });
    expect(res.body.next_cursor).toBeNull();

    expect((await t.as(seeded).op('listRoles', { query: { is_system: false } })).body.data.map((r: Schemas['Role']) => r.id)).toEqual([custom.body.id]);
    expect((await t.as(seeded).op('listRoles', { query: { is_system: true } })).body.data).toHaveLength(5);
  });

  it('walks every page once', async () => {
    const seeded = await t.factories.org();
    for (let i = 0; i < 6; i++) await t.factories.customRole(seeded.orgId, ['member:view'], `Walk ${i}`);
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const res = await t.as(seeded).op('listRoles', { query: { limit: 4, cursor } });
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

  it('400 for a bad limit, an unknown parameter or a cursor of another list; 403 missing_permission', async () => {
    expect((await t.as(org).get('/role?limit=0')).body.code).toBe('validation_failed');
    expect((await t.as(org).get('/role?limit=abc')).body.code).toBe('validation_failed');
    expect((await t.as(org).get('/role?colour=red')).body.code).toBe('validation_failed');
    const teamCursor = Buffer.from(newId('team')).toString('base64url');
    expect((await t.as(org).op('listRoles', { query: { cursor: teamCursor } })).error?.code).toBe('invalid_cursor');
    const nobody = await holder(['member:view']);
    expectError(await t.as(nobody).op('listRoles'), 403, 'missing_permission');
  });
});

describe('createRole', () => {
  it('creates a custom role (billable seat, sorted permissions), 201 with Location, audit entry and role.created', async () => {
    const res = await t.as(org).op('createRole', {
      body: {
        name: 'Connector maintainer',
        description: 'Maintains connectors.',
        permissions: ['toolbox:view', 'connector:manage', 'connector:view'],
      },
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
      const res = await t.as(org).post('/role', body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
    }
  });

  it('409 name_taken, compared without regard to case and including system roles; another organization may use it', async () => {
    await t.as(org).op('createRole', { body: { name: 'Reviewers', permissions: ['member:view'] } });
    for (const taken of ['Reviewers', 'REVIEWERS', 'owner', 'Billing Admin']) {
      const res = await t.as(org).op('createRole', { body: { name: taken, permissions: ['member:view'] } });
      expectError(res, 409, 'name_taken');
    }
    expect((await t.as(other).op('createRole', { body: { name: 'Reviewers', permissions: ['member:view'] } })).status).toBe(201);
  });

  it('403 permission_escalation for a permission the caller does not hold; also through a narrower token', async () => {
    const manager = await holder(['role:manage', 'role:view', 'member:view']);
    const res = await t.as(manager).op('createRole', { body: { name: name(), permissions: ['member:view', 'billing:manage'] } });
    expectError(res, 403, 'permission_escalation');
    expect(res.error?.detail).toContain('billing:manage');
    expect((await t.as(manager).op('createRole', { body: { name: name(), permissions: ['member:view'] } })).status).toBe(201);
    // The owner's token limited to role:manage holds nothing else.
    const narrow = { token: await t.factories.token(org.orgId, org.ownerId, ['role:manage']), org: org.orgId };
    expect((await t.as(narrow).op('createRole', { body: { name: name(), permissions: ['member:view'] } })).error?.code).toBe('permission_escalation');
  });

  it('403 missing_permission without role:manage', async () => {
    const viewer = await holder(['role:view']);
    const res = await t.as(viewer).op('createRole', { body: { name: name(), permissions: ['role:view'] } });
    expectError(res, 403, 'missing_permission');
  });

  it('a session creates one too', async () => {
    const session = await t.factories.session(org.ownerId);
    const res = await t.as({ session, org: org.orgId }).op('createRole', { body: { name: name(), permissions: ['team:view'] } });
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
    const res = await t.as(org).op('getRole', { params: { id: h.roleId } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: h.roleId, member_count: 2, permissions: ['team:view'], is_system: false });
    const member = await t.as(org).op('getRole', { params: { id: org.roleIds.member } });
    expect(member.body).toMatchObject({ name: 'Member', system_key: 'member', is_system: true });
  });

  it('400 for an id that is not a role id; 404 for an unknown id and for another organization’s role', async () => {
    expect((await t.as(org).get('/role/team_01jg3b7f0p3m6q9x2v5c8n1b4k')).body.code).toBe('validation_failed');
    expect((await t.as(org).op('getRole', { params: { id: newId('role') } })).status).toBe(404);
    const theirs = await t.factories.customRole(other.orgId, ['member:view']);
    const res = await t.as(org).op('getRole', { params: { id: theirs } });
    expectError(res, 404, 'not_found');
    expect((await t.as(org).op('getRole', { params: { id: other.roleIds.owner } })).status).toBe(404);
  });

  it('403 missing_permission without role:view', async () => {
    const h = await holder(['member:view']);
    expect((await t.as(h).op('getRole', { params: { id: h.roleId } })).error?.code).toBe('missing_permission');
  });
});

describe('updateRole', () => {
  it('renames, clears the description and replaces permissions; audit with each change from and to; role.updated', async () => {
    const created = (await t.as(org).op('createRole', { body: { name: name(), description: 'Old', permissions: ['connector:view'] } })).body;
    const res = await t.as(org).op('updateRole', {
      params: { id: created.id },
      body: { name: 'Connector owner', description: null, permissions: ['connector:view', 'connector:manage'] },
    });
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
    const bySession = { session, org: org.orgId };
    expect((await t.as(h).op('listRoles')).error?.code).toBe('missing_permission');
    expect((await t.as(bySession).op('listRoles')).error?.code).toBe('missing_permission');
    expect((await t.as(org).op('updateRole', { params: { id: h.roleId }, body: { permissions: ['member:view', 'role:view'] } })).status).toBe(200);
    expect((await t.as(h).op('listRoles')).status).toBe(200);
    expect((await t.as(bySession).op('listRoles')).status).toBe(200);
    expect((await t.as(org).op('updateRole', { params: { id: h.roleId }, body: { permissions: ['member:view'] } })).status).toBe(200);
    expect((await t.as(h).op('listRoles')).error?.code).toBe('missing_permission');
    expect((await t.as(bySession).op('listRoles')).error?.code).toBe('missing_permission');
  });

  it('403 permission_escalation when adding what the caller lacks; taking away is always allowed', async () => {
    const manager = await holder(['role:manage', 'role:view']);
    const target = await t.factories.customRole(org.orgId, ['billing:view', 'role:view']);
    const add = await t.as(manager).op('updateRole', { params: { id: target }, body: { permissions: ['billing:view', 'role:view', 'billing:manage'] } });
    expectError(add, 403, 'permission_escalation');
    // billing:view is not the manager's, but it is already in the role: removing role:view is fine.
    const take = await t.as(manager).op('updateRole', { params: { id: target }, body: { permissions: ['billing:view'] } });
    expect(take.status).toBe(200);
    expect(take.body.permissions).toEqual(['billing:view']);
  });

  it('409 system_role_immutable for a system role; 409 name_taken', async () => {
    const res = await t.as(org).op('updateRole', { params: { id: org.roleIds.member }, body: { name: 'Everyone' } });
    expectError(res, 409, 'system_role_immutable');
    const a = (await t.as(org).op('createRole', { body: { name: name(), permissions: ['team:view'] } })).body;
    const b = (await t.as(org).op('createRole', { body: { name: name(), permissions: ['team:view'] } })).body;
    const clash = await t.as(org).op('updateRole', { params: { id: b.id }, body: { name: a.name.toUpperCase() } });
    expectError(clash, 409, 'name_taken');
    expect((await t.as(org).op('updateRole', { params: { id: b.id }, body: { name: 'Admin' } })).error?.code).toBe('name_taken');
  });

  it('400 validation_failed (empty body, immutable members, wrong types); 404 for another organization’s role, unchanged', async () => {
    const mine = await t.factories.customRole(org.orgId, ['team:view']);
    for (const body of [{}, { seat_class: 'free_admin' }, { is_system: true }, { permissions: 'team:view' }, { name: '' }, { permissions: [] }]) {
      expect((await t.as(org).patch(`/role/${mine}`, body)).body.code).toBe('validation_failed');
    }
    const theirs = await t.factories.customRole(other.orgId, ['team:view'], 'Theirs');
    const res = await t.as(org).op('updateRole', { params: { id: theirs }, body: { name: 'Mine now' } });
    expectError(res, 404, 'not_found');
    expect((await t.as(other).op('getRole', { params: { id: theirs } })).body.name).toBe('Theirs');
  });

  it('403 missing_permission without role:manage', async () => {
    const h = await holder(['role:view']);
    expect((await t.as(h).op('updateRole', { params: { id: h.roleId }, body: { name: name() } })).error?.code).toBe('missing_permission');
  });
});

describe('deleteRole', () => {
  it('deletes an unused custom role: 204, audit entry, role.deleted; then 404', async () => {
    const id = (await t.as(org).op('createRole', { body: { name: name(), permissions: ['team:view'] } })).body.id;
    const res = await t.as(org).op('deleteRole', { params: { id } });
    expect(res.status).toBe(204);
    const [audit] = (await t.factories.auditEntries(org.orgId, 'role.deleted')).filter((a) => a.target_id === id);
    expect(audit).toMatchObject({ target_type: 'role' });
    expect((await t.as(org).op('getRole', { params: { id } })).status).toBe(404);
    expect((await t.as(org).op('deleteRole', { params: { id } })).status).toBe(404);
  });

  it('409 role_in_use while a member holds it or a restriction names it', async () => {
    const h = await holder(['team:view']);
    const held = await t.as(org).op('deleteRole', { params: { id: h.roleId } });
    expectError(held, 409, 'role_in_use');
    expect(held.error?.detail).toContain('1 member');
    const named = await t.factories.customRole(org.orgId, ['team:view']);
    const rst = await restriction(t, org, { applies_to: { role_ids: [named] } });
    const res = await t.as(org).op('deleteRole', { params: { id: named } });
    expectError(res, 409, 'role_in_use');
    expect(res.error?.detail).toContain(rst);
    expect((await t.as(org).op('getRole', { params: { id: named } })).status).toBe(200);
  });

  it('409 role_in_use while a pending invite would grant it or a domain gives it to those who join', async () => {
    const named = await t.factories.customRole(org.orgId, ['team:view']);
    const inviteId = await invite(t, org, { role_ids: [named] });
    const byInvite = await t.as(org).op('deleteRole', { params: { id: named } });
    expectError(byInvite, 409, 'role_in_use');
    expect(byInvite.error?.detail).toContain('1 pending invite');
    expect((await t.as(org).op('revokeInvite', { params: { id: inviteId } })).status).toBe(200);

    const domain = await t.as(org).op('createOrgDomain', { body: { domain: `roles-${newId('role').slice(-8)}.example`, default_role_id: named } });
    expect(domain.status).toBe(201);
    const byDomain = await t.as(org).op('deleteRole', { params: { id: named } });
    expectError(byDomain, 409, 'role_in_use');
    expect(byDomain.error?.detail).toContain('organization domain');
    expect((await t.as(org).op('deleteOrgDomain', { params: { id: domain.body.id } })).status).toBe(204);
    expect((await t.as(org).op('deleteRole', { params: { id: named } })).status).toBe(204);
  });

  it('409 system_role_immutable; 404 for another organization’s role, which stays', async () => {
    expect((await t.as(org).op('deleteRole', { params: { id: org.roleIds.auditor } })).error?.code).toBe('system_role_immutable');
    const theirs = await t.factories.customRole(other.orgId, ['team:view']);
    expect((await t.as(org).op('deleteRole', { params: { id: theirs } })).status).toBe(404);
    expect((await t.as(other).op('getRole', { params: { id: theirs } })).status).toBe(200);
  });

  it('400 for a malformed id; 403 missing_permission', async () => {
    expect((await t.as(org).delete('/role/nope')).body.code).toBe('validation_failed');
    const h = await holder(['role:view']);
    const id = await t.factories.customRole(org.orgId, ['team:view']);
    expect((await t.as(h).op('deleteRole', { params: { id } })).error?.code).toBe('missing_permission');
  });
});

describe('role events, end to end to a webhook receiver', () => {
  it('role.created, role.updated and role.deleted arrive with their data', async () => {
    const seeded = await t.factories.org();
    const hook = await webhookSubscription(t, peers.receiver, seeded, ['role.created', 'role.updated', 'role.deleted']);
    const id = (await t.as(seeded).op('createRole', { body: { name: 'Support', permissions: ['member:view'] } })).body.id;
    await t.as(seeded).op('updateRole', { params: { id }, body: { permissions: ['member:view', 'team:view'] } });
    await t.as(seeded).op('updateRole', { params: { id }, body: { description: 'Same permissions' } });
    await t.as(seeded).op('deleteRole', { params: { id } });
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
    const id = (await t.as(seeded).op('createRole', { body: { name: 'Quiet', permissions: ['member:view'] } })).body.id;
    expect((await t.as(seeded).op('updateRole', { params: { id }, body: { name: 'Quiet', permissions: ['member:view'] } })).status).toBe(200);
    expect(await hook.deliver()).toEqual([]);
  });
});
