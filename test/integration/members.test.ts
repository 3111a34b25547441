import { sql } from 'kysely';
import type { components } from '../../generated/openapi';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError, type OpRequest } from '../support/client';
import { webhookSubscription } from '../support/event-delivery';
import type { SeededOrg } from '../support/factories';
import { usePeers } from '../support/peers';
import { configuredOAuth, customConnector } from '../fixtures/connections';
import { insertTemplate } from '../fixtures/user-toolboxes';

/*
 * The four Members operations over HTTP against the real app on a fresh database; every
 * response is checked against the spec. Events go end to end to a webhook receiver on loopback.
 */

type Schemas = components['schemas'];
type Member = Schemas['Member'];

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

type ListQuery = NonNullable<OpRequest<'listMembers'>['query']>;

/** A member with these roles (system keys or ids) and their token: a caller. */
async function person(seeded: SeededOrg, roles: string[] = ['member'], input: { email?: string; name?: string } = {}) {
  const userId = await t.factories.member(seeded.orgId, { userId: input.email || input.name ? await t.factories.user(input) : undefined, roles });
  const token = await t.factories.token(seeded.orgId, userId);
  return { userId, token, org: seeded.orgId };
}

describe('listMembers', () => {
  it('lists members in the order they joined, with roles, teams, permissions and second factor', async () => {
    const seeded = await t.factories.org();
    const ada = await person(seeded, ['member'], { email: `ada-${Date.now()}@acme.example`, name: 'Ada Lovelace' });
    const custom = await t.factories.customRole(seeded.orgId, ['connector:manage'], 'Maintainer');
    await t.db.insertInto('role_assignments').values({ org_id: seeded.orgId, user_id: ada.userId, role_id: custom }).execute();
    const team = await t.factories.team(seeded.orgId, 'Platform', [ada.userId]);
    await t.factories.enableTotp(seeded.ownerId);
    const res = await t.as(seeded).op('listMembers');
    expect(res.status).toBe(200);
    expect(res.body.data.map((m: Member) => m.user_id)).toEqual([seeded.ownerId, ada.userId]);
    const [first, second] = res.body.data as Member[];
    expect(first).toMatchObject({
      status: 'active',
      status_reason: null,
      via: 'creator',
      roles: [{ id: seeded.roleIds.owner, name: 'Owner', is_system: true, seat_class: 'billable' }],
      teams: [],
      has_second_factor: true,
    });
    expect(first!.permissions).toContain('billing:manage');
    expect(second).toMatchObject({
      user_id: ada.userId,
      user: { id: ada.userId, name: 'Ada Lovelace', avatar_url: null },
      status: 'active',
      via: 'invite',
      roles: [
        { id: seeded.roleIds.member, name: 'Member' },
        { id: custom, name: 'Maintainer', is_system: false },
      ],
      teams: [{ id: team, name: 'Platform' }],
      has_second_factor: false,
    });
    expect(second!.permissions).toContain('connector:manage');
    expect(second!.permissions).toEqual([...second!.permissions].sort());
    expect(res.body.next_cursor).toBeNull();
  });

  it('filters by status (removed only when asked), role, team and text', async () => {
    const seeded = await t.factories.org();
    const suspended = await t.factories.member(seeded.orgId, { status: 'suspended' });
    const removed = await t.factories.member(seeded.orgId, { status: 'removed', roles: [] });
    const grace = await person(seeded, ['auditor'], { email: `grace-${Date.now()}@navy.example`, name: 'Grace Hopper' });
    const team = await t.factories.team(seeded.orgId, 'Ops', [suspended]);
    const ids = async (query: ListQuery) => (await t.as(seeded).op('listMembers', { query })).body.data.map((m) => m.user_id);
    expect(await ids({})).toEqual([seeded.ownerId, suspended, grace.userId]);
    expect(await ids({ status: 'removed' })).toEqual([removed]);
    expect(await ids({ status: 'suspended' })).toEqual([suspended]);
    expect(await ids({ role_id: seeded.roleIds.auditor })).toEqual([grace.userId]);
    expect(await ids({ team_id: team })).toEqual([suspended]);
    expect(await ids({ q: 'HOPPER' })).toEqual([grace.userId]);
    expect(await ids({ q: 'navy.exa' })).toEqual([grace.userId]);
    expect(await ids({ q: '%' })).toEqual([]);
  });

  it('walks every page once, also among members who joined at the same instant', async () => {
    const seeded = await t.factories.org();
    for (let i = 0; i < 3; i++) await t.factories.member(seeded.orgId);
    // Five who join in one statement share joined_at: the user id breaks the tie.
    const users = await Promise.all([1, 2, 3, 4, 5].map(() => t.factories.user()));
    await t.db
      .insertInto('memberships')
      .values(users.map((user_id) => ({ org_id: seeded.orgId, user_id, status: 'active' as const, via: 'invite' as const })))
      .execute();
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const res = await t.as(seeded).op('listMembers', { query: { limit: 2, cursor } });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((m: Member) => m.user_id));
      cursor = res.body.next_cursor ?? undefined;
      pages += 1;
    } while (cursor);
    expect(seen).toHaveLength(9);
    expect(new Set(seen).size).toBe(9);
    expect(pages).toBe(5);
    expect(seen.slice(4).sort()).toEqual([...users].sort());
  });

  it('400 unknown_reference for another organization’s role or team; 400 for bad parameters and cursors', async () => {
    const theirTeam = await t.factories.team(other.orgId, 'Theirs');
    const res = await t.as(org).op('listMembers', { query: { role_id: other.roleIds.member, team_id: theirTeam } });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors.map((e: { pointer: string }) => e.pointer)).toEqual(['/role_id', '/team_id']);
    expect((await t.as(org).get('/member?status=gone')).body.code).toBe('validation_failed');
    expect((await t.as(org).get('/member?role_id=team_01jg3b7f0p3m6q9x2v5c8n1b4k')).body.code).toBe('validation_failed');
    expect((await t.as(org).get('/member?limit=201')).body.code).toBe('validation_failed');
    expect((await t.as(org).get('/member?colour=red')).body.code).toBe('validation_failed');
    expect((await t.as(org).op('listMembers', { query: { cursor: Buffer.from(newId('role')).toString('base64url') } })).error?.code).toBe('invalid_cursor');
  });

  it('403 missing_permission without member:view', async () => {
    const roleId = await t.factories.customRole(org.orgId, ['team:view']);
    const p = await person(org, [roleId]);
    expect((await t.as(p).op('listMembers')).error?.code).toBe('missing_permission');
  });
});

describe('getMember', () => {
  it('answers a member, and a removed one with status removed', async () => {
    const p = await person(org);
    const res = await t.as(org).op('getMember', { params: { userId: p.userId } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ user_id: p.userId, status: 'active', roles: [{ id: org.roleIds.member }] });
    const removed = await t.factories.member(org.orgId, { status: 'removed', roles: [] });
    expect((await t.as(org).op('getMember', { params: { userId: removed } })).body).toMatchObject({ status: 'removed', roles: [], permissions: [] });
  });

  it('404 for someone never a member here or another organization’s member; 400 for a malformed id; 403', async () => {
    const theirs = await t.factories.member(other.orgId);
    expectError(await t.as(org).op('getMember', { params: { userId: theirs } }), 404, 'not_found');
    expect((await t.as(org).op('getMember', { params: { userId: newId('user') } })).status).toBe(404);
    expect((await t.as(org).get('/member/role_01jg3b7f0p3m6q9x2v5c8n1b4k')).body.code).toBe('validation_failed');
    const p = await person(org, [await t.factories.customRole(org.orgId, ['team:view'])]);
    expect((await t.as(p).op('getMember', { params: { userId: p.userId } })).error?.code).toBe('missing_permission');
  });
});

describe('updateMember: roles', () => {
  it('replaces the roles; audit with before and after; effective at the next request of the member’s token', async () => {
    const p = await person(org);
    expect((await t.as(p).op('listTeams')).status).toBe(200);
    expect((await t.as(p).op('createTeam', { body: { name: `T ${Date.now()}` } })).error?.code).toBe('missing_permission');
    const custom = await t.factories.customRole(org.orgId, ['team:manage', 'team:view']);
    const before = (await t.as(org).op('getMember', { params: { userId: p.userId } })).body.updated_at;
    await new Promise((resolve) => setTimeout(resolve, 5));
    const res = await t.as(org).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.member, custom] } });
    expect(res.status).toBe(200);
    // updated_at is when the membership's status or roles last changed.
    expect(Date.parse(res.body.updated_at)).toBeGreaterThan(Date.parse(before));
    expect(res.body.roles.map((r: { id: string }) => r.id)).toEqual([org.roleIds.member, custom].sort());
    expect(res.body.permissions).toContain('team:manage');
    expect((await t.as(p).op('createTeam', { body: { name: `T ${Date.now()}` } })).status).toBe(201);
    const [audit] = (await t.factories.auditEntries(org.orgId, 'member.updated')).filter((a) => a.target_id === p.userId);
    expect(audit).toMatchObject({ target_type: 'member', actor_user_id: org.ownerId });
    expect(audit!.changes).toEqual({ role_ids: { from: [org.roleIds.member], to: [org.roleIds.member, custom].sort() } });
    // Taken away again: refused at once.
    expect((await t.as(org).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.member] } })).status).toBe(200);
    expect((await t.as(p).op('createTeam', { body: { name: `T ${Date.now()}` } })).error?.code).toBe('missing_permission');
  });

  it('403 permission_escalation: a role granting what the caller lacks, or the Owner role given or taken by a non-Owner', async () => {
    const admin = await person(org, ['admin']);
    const p = await person(org);
    const billing = await t.as(admin).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.billing_admin] } });
    expectError(billing, 403, 'permission_escalation');
    expect(billing.error?.detail).toContain('billing:manage');
    expect((await t.as(admin).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.owner] } })).error?.code).toBe(
      'permission_escalation',
    );
    const coOwner = await person(org, ['owner']);
    expect((await t.as(admin).op('updateMember', { params: { userId: coOwner.userId }, body: { role_ids: [org.roleIds.admin] } })).error?.code).toBe(
      'permission_escalation',
    );
    // What the admin holds, it may give.
    expect((await t.as(admin).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.admin] } })).status).toBe(200);
    // An Owner gives the Owner role.
    expect((await t.as(org).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.owner] } })).status).toBe(200);
  });

  it('403 permission_escalation: taking away a role is bounded like giving one (a member:manage role cannot strip an Admin)', async () => {
    const seeded = await t.factories.org();
    // A people manager: member:manage and the Member role's permissions, so it may give and take Member.
    const memberPermissions = (await t.as(seeded).op('getRole', { params: { id: seeded.roleIds.member } })).body.permissions;
    const managerRole = await t.factories.customRole(seeded.orgId, [...new Set([...memberPermissions, 'member:manage'])], 'People manager');
    const manager = await person(seeded, [managerRole]);
    const admin = await person(seeded, ['admin', 'member']);
    const strip = await t.as(manager).op('updateMember', { params: { userId: admin.userId }, body: { role_ids: [seeded.roleIds.member] } });
    expectError(strip, 403, 'permission_escalation');
    expect(strip.error?.detail).toContain('take away a role');
    expect((await t.as(seeded).op('getMember', { params: { userId: admin.userId } })).body.roles.map((r: { id: string }) => r.id)).toEqual(
      [seeded.roleIds.admin, seeded.roleIds.member].sort(),
    );
    // An Admin lacks billing:manage: it may not take the Billing admin role away either.
    const payer = await person(seeded, ['member', 'billing_admin']);
    const unbill = await t.as(admin).op('updateMember', { params: { userId: payer.userId }, body: { role_ids: [seeded.roleIds.member] } });
    expectError(unbill, 403, 'permission_escalation');
    expect(unbill.error?.detail).toContain('billing:manage');
    // What the manager holds, it may take away.
    const plain = await person(seeded, ['member', managerRole]);
    expect((await t.as(manager).op('updateMember', { params: { userId: plain.userId }, body: { role_ids: [seeded.roleIds.member] } })).status).toBe(200);
  });

  it('403 permission_escalation: suspending or reactivating someone holding what the caller lacks (an Admin, by a member:manage role)', async () => {
    const seeded = await t.factories.org();
    const memberPermissions = (await t.as(seeded).op('getRole', { params: { id: seeded.roleIds.member } })).body.permissions;
    const managerRole = await t.factories.customRole(seeded.orgId, [...new Set([...memberPermissions, 'member:manage'])], 'People manager');
    const manager = await person(seeded, [managerRole]);
    const admin = await person(seeded, ['admin']);
    const suspend = await t.as(manager).op('updateMember', { params: { userId: admin.userId }, body: { status: 'suspended' } });
    expectError(suspend, 403, 'permission_escalation');
    expect(suspend.error?.detail).toContain('suspend a member');
    expect((await t.as(admin).op('listMembers')).status).toBe(200);
    // Suspended by an Owner, the Admin is not reactivated by the manager either.
    expect((await t.as(seeded).op('updateMember', { params: { userId: admin.userId }, body: { status: 'suspended' } })).status).toBe(200);
    expectError(await t.as(manager).op('updateMember', { params: { userId: admin.userId }, body: { status: 'active' } }), 403, 'permission_escalation');
    expect((await t.as(seeded).op('getMember', { params: { userId: admin.userId } })).body.status).toBe('suspended');
    // A member holding no more than the manager: suspended and reactivated.
    const plain = await person(seeded);
    expect((await t.as(manager).op('updateMember', { params: { userId: plain.userId }, body: { status: 'suspended' } })).status).toBe(200);
    expect((await t.as(manager).op('updateMember', { params: { userId: plain.userId }, body: { status: 'active' } })).status).toBe(200);
  });

  it('409 last_owner when the only active Owner is demoted or suspended; fine once another Owner exists', async () => {
    const seeded = await t.factories.org();
    const demote = await t.as(seeded).op('updateMember', { params: { userId: seeded.ownerId }, body: { role_ids: [seeded.roleIds.admin] } });
    expectError(demote, 409, 'last_owner');
    const second = await person(seeded, ['owner']);
    expect((await t.as(second).op('updateMember', { params: { userId: seeded.ownerId }, body: { status: 'suspended' } })).status).toBe(200);
    // Now the second is the only active Owner.
    const self = await t.as(second).op('updateMember', { params: { userId: second.userId }, body: { role_ids: [seeded.roleIds.member] } });
    expectError(self, 409, 'last_owner');
    expect((await t.as(second).op('updateMember', { params: { userId: seeded.ownerId }, body: { status: 'active' } })).status).toBe(200);
    expect((await t.as(seeded).op('updateMember', { params: { userId: seeded.ownerId }, body: { role_ids: [seeded.roleIds.admin] } })).status).toBe(200);
  });

  it('400 unknown_reference for a role of another organization; 409 invalid_transition for a removed member', async () => {
    const p = await person(org);
    const res = await t.as(org).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.member, other.roleIds.admin] } });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors).toEqual([{ in: 'body', pointer: '/role_ids/1', message: expect.any(String) }]);
    const removed = await t.factories.member(org.orgId, { status: 'removed', roles: [] });
    expect((await t.as(org).op('updateMember', { params: { userId: removed }, body: { role_ids: [org.roleIds.member] } })).error?.code).toBe(
      'invalid_transition',
    );
  });

  it('403 entitlement_exceeded when a billable role would take a seat past the plan’s limit', async () => {
    const seeded = await t.factories.org();
    // The free plan has 1000 seats: fill them (the owner holds one).
    const ids = Array.from({ length: 999 }, () => newId('user'));
    await sql`
      with u as (
        insert into users (id, email) select id, id || '@seats.example' from unnest(${ids}::text[]) as id returning id
      ), m as (insert into memberships (org_id, user_id, status, via) select ${seeded.orgId}, id, 'active', 'invite' from u returning user_id)
      insert into role_assignments (org_id, user_id, role_id) select ${seeded.orgId}, user_id, ${seeded.roleIds.member} from m`.execute(t.db);
    const free = await person(seeded, ['billing_admin']);
    const res = await t.as(seeded).op('updateMember', { params: { userId: free.userId }, body: { role_ids: [seeded.roleIds.member] } });
    expectError(res, 403, 'entitlement_exceeded');
    expect(res.error?.detail).toContain('seats');
    // A free_admin role takes no seat.
    expect((await t.as(seeded).op('updateMember', { params: { userId: free.userId }, body: { role_ids: [seeded.roleIds.auditor] } })).status).toBe(200);
    // Someone who holds a seat already may change billable roles.
    expect(
      (await t.as(seeded).op('updateMember', { params: { userId: seeded.ownerId }, body: { role_ids: [seeded.roleIds.owner, seeded.roleIds.member] } })).status,
    ).toBe(200);
    // A suspended member takes no seat: reactivating one needs a free seat.
    const away = await t.factories.member(seeded.orgId, { roles: ['member'], status: 'suspended' });
    const back = await t.as(seeded).op('updateMember', { params: { userId: away }, body: { status: 'active' } });
    expectError(back, 403, 'entitlement_exceeded');
  });

  it('400 validation_failed; 404 for another organization’s member, unchanged; 403 missing_permission', async () => {
    const p = await person(org);
    for (const body of [
      {},
      { role_ids: [] },
      { role_ids: 'role_x' },
      { role_ids: ['team_01jg3b7f0p3m6q9x2v5c8n1b4k'] },
      { status: 'removed' },
      { role_ids: [org.roleIds.member], colour: 'red' },
    ]) {
      expect((await t.as(org).patch(`/member/${p.userId}`, body)).body.code).toBe('validation_failed');
    }
    const theirs = await t.factories.member(other.orgId);
    const res = await t.as(org).op('updateMember', { params: { userId: theirs }, body: { role_ids: [org.roleIds.admin] } });
    expectError(res, 404, 'not_found');
    expect((await t.as(other).op('getMember', { params: { userId: theirs } })).body.roles).toEqual([expect.objectContaining({ id: other.roleIds.member })]);
    expect((await t.as(p).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [org.roleIds.admin] } })).error?.code).toBe(
      'missing_permission',
    );
  });
});

describe('updateMember: suspend and reactivate', () => {
  it('a suspended member’s token is refused (401) and session is not a member (403); reactivated, both work again', async () => {
    const p = await person(org);
    const session = await t.factories.session(p.userId);
    const bySession = { session, org: org.orgId };
    expect((await t.as(bySession).op('listMembers')).status).toBe(200);
    const res = await t.as(org).op('updateMember', { params: { userId: p.userId }, body: { status: 'suspended' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'suspended', status_reason: 'suspended', roles: [{ id: org.roleIds.member }] });
    const byToken = await t.as(p).op('listMembers');
    expectError(byToken, 401, 'invalid_token');
    expect(byToken.error?.detail).toContain('suspended');
    expectError(await t.as(bySession).op('listMembers'), 403, 'not_a_member');
    const [audit] = (await t.factories.auditEntries(org.orgId, 'member.updated')).filter((a) => a.target_id === p.userId);
    expect(audit!.changes).toEqual({ status: { from: 'active', to: 'suspended' } });

    const back = await t.as(org).op('updateMember', { params: { userId: p.userId }, body: { status: 'active' } });
    expect(back.body).toMatchObject({ status: 'active', status_reason: null });
    expect((await t.as(p).op('listMembers')).status).toBe(200);
    expect((await t.as(bySession).op('listMembers')).status).toBe(200);
  });

  it('409 invalid_transition for suspending oneself; 403 permission_escalation for a non-Owner suspending an Owner', async () => {
    const admin = await person(org, ['admin']);
    const self = await t.as(admin).op('updateMember', { params: { userId: admin.userId }, body: { status: 'suspended' } });
    expectError(self, 409, 'invalid_transition');
    const coOwner = await person(org, ['owner']);
    expect((await t.as(admin).op('updateMember', { params: { userId: coOwner.userId }, body: { status: 'suspended' } })).error?.code).toBe(
      'permission_escalation',
    );
  });
});

describe('removeMember', () => {
  it('removes someone else: 204, audit, roles and teams gone, tokens revoked, sessions no longer act here', async () => {
    const p = await person(org);
    const session = await t.factories.session(p.userId);
    const team = await t.factories.team(org.orgId, `Leavers ${Date.now()}`, [p.userId]);
    const res = await t.as(org).op('removeMember', { params: { userId: p.userId } });
    expect(res.status).toBe(204);
    const gone = (await t.as(org).op('getMember', { params: { userId: p.userId } })).body;
    expect(gone).toMatchObject({ status: 'removed', status_reason: 'removed', roles: [], teams: [], permissions: [] });
    expect((await t.as(p).op('listMembers')).status).toBe(401);
    expect((await t.as({ session, org: org.orgId }).op('listMembers')).error?.code).toBe('not_a_member');
    expect(await t.db.selectFrom('api_tokens').select('revoked_at').where('user_id', '=', p.userId).where('org_id', '=', org.orgId).execute()).toEqual([
      { revoked_at: expect.any(Date) },
    ]);
    expect((await t.as(org).op('getTeam', { params: { id: team } })).body.member_count).toBe(0);
    const [audit] = (await t.factories.auditEntries(org.orgId, 'member.removed')).filter((a) => a.target_id === p.userId);
    expect(audit!.changes).toMatchObject({
      status: { from: 'active', to: 'removed' },
      status_reason: 'removed',
      role_ids: [org.roleIds.member],
      api_tokens_revoked: 1,
    });
    // Already removed: 404.
    expect((await t.as(org).op('removeMember', { params: { userId: p.userId } })).status).toBe(404);
  });

  it('runs the removal hooks: connections disconnected (owner_left), user toolboxes and MCP servers deleted', async () => {
    const seeded = await t.factories.org();
    const p = await person(seeded);
    const slug = await customConnector(t, seeded.orgId, { mcp_url: 'https://mcp.acme.example/mcp', auth: configuredOAuth });
    const conn = await t.as(p).op('createConnection', { body: { connector_slug: slug } });
    expect(conn.status).toBe(201);
    const templateId = await insertTemplate(t, seeded.orgId, seeded.ownerId, { entries: [] });
    const box = await t.as(p).op('createUserToolbox', { body: { template_id: templateId } });
    expect(box.status).toBe(201);
    const server = await t.as(p).op('createMcpServer', { params: { id: box.body.id }, body: { name: 'Laptop' } });
    expect(server.status).toBe(201);
    const dynamic = await t.as(p).op('createMcpServer', { params: { id: 'utbx_dyn_all' }, body: { name: 'Everything' } });
    expect(dynamic.status).toBe(201);
    const hook = await webhookSubscription(t, peers.receiver, seeded, ['connection.disconnected']);

    expect((await t.as(seeded).op('removeMember', { params: { userId: p.userId } })).status).toBe(204);
    const after = await t.as(seeded).op('getConnection', { params: { id: conn.body.id } });
    expect(after.body).toMatchObject({ status: 'disconnected', status_reason: 'owner_left', has_credentials: false });
    expect(await t.db.selectFrom('user_toolboxes').select('id').where('owner_user_id', '=', p.userId).execute()).toEqual([]);
    expect(await t.db.selectFrom('mcp_servers').select('id').where('owner_user_id', '=', p.userId).execute()).toEqual([]);
    const mcp = await fetch(`${t.url}/mcp/${server.body.mcp_server.id}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${server.body.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    expect(mcp.status).toBe(401);
    const delivered = await hook.deliver();
    expect(delivered.map((d) => d.type)).toEqual(['connection.disconnected']);
    expect(delivered[0]!.data.connection.id).toBe(conn.body.id);
  });

  it('a member leaves without member:manage (status_reason left); removing someone else needs member:manage', async () => {
    const p = await person(org);
    const q = await person(org);
    const res = await t.as(p).op('removeMember', { params: { userId: q.userId } });
    expectError(res, 403, 'missing_permission');
    expect((await t.as(p).op('removeMember', { params: { userId: p.userId } })).status).toBe(204);
    expect((await t.as(org).op('getMember', { params: { userId: p.userId } })).body).toMatchObject({ status: 'removed', status_reason: 'left' });
    expect((await t.as(org).op('getMember', { params: { userId: q.userId } })).body.status).toBe('active');
  });

  it('409 last_owner for the last active Owner leaving; 403 permission_escalation for a non-Owner removing an Owner', async () => {
    const seeded = await t.factories.org();
    const res = await t.as(seeded).op('removeMember', { params: { userId: seeded.ownerId } });
    expectError(res, 409, 'last_owner');
    const admin = await person(seeded, ['admin']);
    expect((await t.as(admin).op('removeMember', { params: { userId: seeded.ownerId } })).error?.code).toBe('permission_escalation');
    const second = await person(seeded, ['owner']);
    expect((await t.as(second).op('removeMember', { params: { userId: seeded.ownerId } })).status).toBe(204);
  });

  it('403 permission_escalation for removing someone holding what the caller lacks (an Admin, by a member:manage role)', async () => {
    const seeded = await t.factories.org();
    const memberPermissions = (await t.as(seeded).op('getRole', { params: { id: seeded.roleIds.member } })).body.permissions;
    const managerRole = await t.factories.customRole(seeded.orgId, [...new Set([...memberPermissions, 'member:manage'])], 'People manager');
    const manager = await person(seeded, [managerRole]);
    const admin = await person(seeded, ['admin']);
    const res = await t.as(manager).op('removeMember', { params: { userId: admin.userId } });
    expectError(res, 403, 'permission_escalation');
    expect(res.error?.detail).toContain('remove a member');
    expect((await t.as(seeded).op('getMember', { params: { userId: admin.userId } })).body).toMatchObject({
      status: 'active',
      roles: [{ id: seeded.roleIds.admin }],
    });
    expect((await t.as(admin).op('listMembers')).status).toBe(200);
    // An Admin lacks billing:manage: it may not remove a Billing admin.
    const payer = await person(seeded, ['billing_admin']);
    expectError(await t.as(admin).op('removeMember', { params: { userId: payer.userId } }), 403, 'permission_escalation');
    // Someone holding no more than the manager is removed; anyone may still leave.
    const plain = await person(seeded);
    expect((await t.as(manager).op('removeMember', { params: { userId: plain.userId } })).status).toBe(204);
    expect((await t.as(admin).op('removeMember', { params: { userId: admin.userId } })).status).toBe(204);
  });

  it('404 for another organization’s member, who stays; 400 for a malformed id', async () => {
    const theirs = await t.factories.member(other.orgId);
    expect((await t.as(org).op('removeMember', { params: { userId: theirs } })).status).toBe(404);
    expect((await t.as(other).op('getMember', { params: { userId: theirs } })).body.status).toBe('active');
    expect((await t.as(org).delete('/member/nobody')).body.code).toBe('validation_failed');
  });
});

describe('member events, end to end to a webhook receiver', () => {
  it('member.roles_updated, member.removed (suspended, then removed) arrive with their data', async () => {
    const seeded = await t.factories.org();
    const email = `lin-${Date.now()}@acme.example`;
    const p = await person(seeded, ['member'], { email, name: 'Lin' });
    const hook = await webhookSubscription(t, peers.receiver, seeded, ['member.roles_updated', 'member.removed']);
    await t.as(seeded).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [seeded.roleIds.member, seeded.roleIds.auditor] } });
    await t.as(seeded).op('updateMember', { params: { userId: p.userId }, body: { role_ids: [seeded.roleIds.member, seeded.roleIds.auditor] } });
    await t.as(seeded).op('updateMember', { params: { userId: p.userId }, body: { status: 'suspended' } });
    await t.as(seeded).op('removeMember', { params: { userId: p.userId } });
    const member = { user_id: p.userId, email, name: 'Lin' };
    expect(await hook.deliver()).toEqual([
      {
        type: 'member.roles_updated',
        data: { member, role_ids: [seeded.roleIds.member, seeded.roleIds.auditor].sort(), previous_role_ids: [seeded.roleIds.member] },
      },
      { type: 'member.removed', data: { member, status: 'suspended' } },
      { type: 'member.removed', data: { member, status: 'removed' } },
    ]);
  });
});
