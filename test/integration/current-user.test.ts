import { PERMISSIONS, rolePermissions as permissionsOf } from '../../src/identity/permissions';
import { newId } from '../../src/lib/ids';
import { settle, startTestApp, type TestApp } from '../support/app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const sorted = (values: readonly string[]) => [...values].sort();
/** GET /user/me through the typed client. */
const me = (credential: { token?: string; session?: string }, query: { current_org_id?: string } = {}) =>
  settle(t.client(credential).GET('/user/me', { params: { query } }));

async function organizationRow(orgId: string) {
  const row = await t.db.selectFrom('organizations').selectAll().where('id', '=', orgId).executeTakeFirstOrThrow();
  return {
    id: row.id,
    name: row.name,
    slug: row.slug,
    logo_url: row.logo_url,
    require_mfa: row.require_mfa,
    plan: row.plan,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

async function joinedAt(orgId: string, userId: string): Promise<string> {
  const row = await t.db.selectFrom('memberships').select('joined_at').where('org_id', '=', orgId).where('user_id', '=', userId).executeTakeFirstOrThrow();
  return row.joined_at.toISOString();
}

/** What a role grants as the server reads it: a system role's permissions come from the catalog. */
async function rolePermissions(roleId: string): Promise<string[]> {
  return [...permissionsOf(await t.db.selectFrom('roles').select(['system_key', 'permissions']).where('id', '=', roleId).executeTakeFirstOrThrow())];
}

describe('getCurrentUser: profile', () => {
  it('returns the profile members from the user row', async () => {
    const userId = await t.factories.user({ email: 'grace@hopper.example', name: 'Grace Hopper' });
    await t.db.updateTable('users').set({ avatar_url: 'https://avatars.example/grace.png' }).where('id', '=', userId).execute();
    const row = await t.db.selectFrom('users').selectAll().where('id', '=', userId).executeTakeFirstOrThrow();
    const session = await t.factories.session(userId);

    const res = await me({ session });

    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      id: userId,
      email: 'grace@hopper.example',
      name: 'Grace Hopper',
      avatar_url: 'https://avatars.example/grace.png',
      created_at: row.created_at.toISOString(),
      updated_at: row.updated_at.toISOString(),
      mfa_enabled: false,
      passkey_count: 0,
      is_root_org_staff: false,
    });
    expect(res.body.created_at).toMatch(ISO_MS);
  });

  it('returns null for a name and avatar that are not set', async () => {
    const userId = await t.factories.user();
    const res = await me({ session: await t.factories.session(userId) });
    expect(res.status).toBe(200);
    expect(res.body.name).toBeNull();
    expect(res.body.avatar_url).toBeNull();
  });

  it('returns an empty organizations list for a user without organizations', async () => {
    const userId = await t.factories.user();
    const res = await me({ session: await t.factories.session(userId) });
    expect(res.status).toBe(200);
    expect(res.body.organizations).toEqual([]);
    expect(res.body).toMatchObject({ mfa_setup_required: false, mfa_setup_required_org_ids: [], mfa_setup_required_org_count: 0 });
  });

  it('reports mfa_enabled from the TOTP enrolment', async () => {
    const userId = await t.factories.user();
    const session = await t.factories.session(userId);
    expect((await me({ session })).body.mfa_enabled).toBe(false);
    await t.factories.enableTotp(userId);
    expect((await me({ session })).body.mfa_enabled).toBe(true);
  });

  it('counts the passkeys the user holds', async () => {
    const userId = await t.factories.user();
    const session = await t.factories.session(userId);
    await t.factories.passkey(userId);
    await t.factories.passkey(userId);
    const other = await t.factories.user();
    await t.factories.passkey(other);
    expect((await me({ session })).body.passkey_count).toBe(2);
  });

  it('says is_root_org_staff false for a customer and true for an operator staff account', async () => {
    const { ownerId, token } = await t.factories.org();
    expect((await me({ token })).body.is_root_org_staff).toBe(false);
    expect((await me({ session: await t.factories.session(ownerId) })).body.is_root_org_staff).toBe(false);

    const staffId = await t.factories.user({ staff: true });
    expect((await me({ session: await t.factories.session(staffId) })).body.is_root_org_staff).toBe(true);
  });

  it('refuses unknown query parameters', async () => {
    const userId = await t.factories.user();
    const res = await t.as({ session: await t.factories.session(userId) }).get('/user/me?verbose=1');
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('validation_failed');
    expect(res.body.errors).toEqual([{ in: 'query', pointer: '/verbose', message: 'is not a parameter of this operation' }]);
  });
});

describe('getCurrentUser: organizations', () => {
  it('lists one entry per active membership, in organization id order, omitting suspended and removed ones', async () => {
    const userId = await t.factories.user();
    const owned = await t.factories.org({ ownerId: userId });
    const joined = await t.factories.org();
    await t.factories.member(joined.orgId, { userId, roles: ['member'] });
    const suspended = await t.factories.org();
    await t.factories.member(suspended.orgId, { userId, status: 'suspended', via: 'scim' });
    const removed = await t.factories.org();
    await t.factories.member(removed.orgId, { userId, status: 'removed' });

    const res = await me({ session: await t.factories.session(userId) });

    expect(res.status).toBe(200);
    expect(res.body.organizations.map((o: any) => o.organization.id)).toEqual(sorted([owned.orgId, joined.orgId]));
  });

  it('describes each organization, the membership facts, roles, teams and permissions', async () => {
    const userId = await t.factories.user();
    const owned = await t.factories.org({ ownerId: userId, name: 'Own Things' });
    const joined = await t.factories.org({ name: 'Joined Co' });
    const customPermissions = ['notification:view', 'team:manage', 'member:view'];
    const customRoleId = await t.factories.customRole(joined.orgId, customPermissions, 'Release managers');
    await t.factories.member(joined.orgId, { userId, roles: ['billing_admin', customRoleId] });
    const platform = await t.factories.team(joined.orgId, 'Platform', [userId]);
    await t.factories.team(joined.orgId, 'Not mine', [joined.ownerId]);
    const ownTeam = await t.factories.team(owned.orgId, 'Founders', [userId]);

    const res = await me({ session: await t.factories.session(userId) });
    expect(res.status).toBe(200);
    const byId = new Map<string, any>(res.body.organizations.map((o: any) => [o.organization.id, o]));

    expect(byId.get(owned.orgId)).toEqual({
      organization: await organizationRow(owned.orgId),
      member: { user_id: userId, status: 'active', via: 'creator', joined_at: await joinedAt(owned.orgId, userId) },
      roles: [{ id: owned.roleIds.owner, name: 'Owner', is_system: true, seat_class: 'billable' }],
      teams: [{ id: ownTeam, name: 'Founders' }],
      permissions: sorted(PERMISSIONS),
    });

    const billingPermissions = await rolePermissions(joined.roleIds.billing_admin);
    const roles = [
      { id: joined.roleIds.billing_admin, name: 'Billing admin', is_system: true, seat_class: 'free_admin' },
      { id: customRoleId, name: 'Release managers', is_system: false, seat_class: 'billable' },
    ];
    const entry = byId.get(joined.orgId);
    expect(entry).toEqual({
      organization: await organizationRow(joined.orgId),
      member: { user_id: userId, status: 'active', via: 'invite', joined_at: await joinedAt(joined.orgId, userId) },
      roles: expect.arrayContaining(roles),
      teams: [{ id: platform, name: 'Platform' }],
      permissions: sorted([...new Set([...billingPermissions, ...customPermissions])]),
    });
    expect(entry.roles).toHaveLength(2);
    expect(entry.organization.name).toBe('Joined Co');
    expect(entry.member.joined_at).toMatch(ISO_MS);
  });

  it('unions the permissions of every role held, sorted and without duplicates', async () => {
    const { orgId, roleIds } = await t.factories.org();
    const customRoleId = await t.factories.customRole(orgId, ['notification:manage', 'organization:view', 'audit_log:view']);
    const userId = await t.factories.member(orgId, { roles: ['member', customRoleId] });

    const res = await me({ session: await t.factories.session(userId) });

    const memberPermissions = await rolePermissions(roleIds.member);
    expect(memberPermissions).toContain('organization:view');
    const expected = sorted([...new Set([...memberPermissions, 'notification:manage', 'organization:view', 'audit_log:view'])]);
    expect(res.body.organizations[0].permissions).toEqual(expected);
    expect(new Set(res.body.organizations[0].permissions).size).toBe(expected.length);
  });

  it('lists no permissions for a member without roles', async () => {
    const { orgId } = await t.factories.org();
    const userId = await t.factories.member(orgId, { roles: [] });
    const res = await me({ session: await t.factories.session(userId) });
    expect(res.body.organizations).toHaveLength(1);
    expect(res.body.organizations[0]).toMatchObject({ roles: [], teams: [], permissions: [] });
  });

  it('reads roles afresh on every call', async () => {
    const { orgId, roleIds } = await t.factories.org();
    const userId = await t.factories.member(orgId, { roles: ['member'] });
    const session = await t.factories.session(userId);
    expect((await me({ session })).body.organizations[0].permissions).not.toContain('notification:manage');

    await t.db.insertInto('role_assignments').values({ org_id: orgId, user_id: userId, role_id: roleIds.admin }).execute();

    const after = (await me({ session })).body.organizations[0];
    expect(after.permissions).toContain('notification:manage');
    expect(after.roles.map((r: any) => r.name).sort()).toEqual(['Admin', 'Member']);
  });
});

describe('getCurrentUser: with an API token', () => {
  it('lists only the token’s organization, with the token ∩ roles permissions', async () => {
    const userId = await t.factories.user();
    const other = await t.factories.org({ ownerId: userId, requireMfa: true });
    const { orgId, roleIds } = await t.factories.org();
    await t.factories.member(orgId, { userId, roles: ['member'] });
    const grant = ['notification:view', 'member:view', 'connector:view', 'file:manage'];
    const token = await t.factories.token(orgId, userId, grant);

    const res = await me({ token });

    expect(res.status).toBe(200);
    expect(res.body.organizations).toHaveLength(1);
    const [entry] = res.body.organizations;
    expect(entry.organization.id).toBe(orgId);
    expect(entry.organization.id).not.toBe(other.orgId);
    expect(entry.roles).toEqual([{ id: roleIds.member, name: 'Member', is_system: true, seat_class: 'billable' }]);
    // notification:view is in the token's list but not in the Member role: it is not effective.
    expect(entry.permissions).toEqual(['connector:view', 'file:manage', 'member:view']);
  });

  it('describes the token in credential', async () => {
    const { orgId, ownerId } = await t.factories.org();
    const grant = ['team:view', 'notification:view', 'member:view'];
    const expiresAt = new Date(Date.now() + 7 * 86_400_000);
    const token = await t.factories.token(orgId, ownerId, grant, { expiresAt });
    const tokenId = await t.factories.tokenId(token);

    const res = await me({ token });

    expect(tokenId).toMatch(/^tok_/);
    expect(res.body.credential).toEqual({
      type: 'api_token',
      id: tokenId,
      organization_id: orgId,
      permissions: sorted(grant),
      expires_at: expiresAt.toISOString(),
    });
    expect(res.body.organizations[0].permissions).toEqual(sorted(grant));
  });

  it('says expires_at null for a token that does not expire', async () => {
    const { token } = await t.factories.org();
    const res = await me({ token });
    expect(res.body.credential.expires_at).toBeNull();
    expect(res.body.credential.permissions).toEqual(sorted(PERMISSIONS));
  });

  it('never requires a second factor of a token, even when the organization requires one', async () => {
    const { orgId, ownerId } = await t.factories.org({ requireMfa: true });
    await t.factories.org({ ownerId, requireMfa: true });
    const token = await t.factories.token(orgId, ownerId);

    const res = await me({ token });

    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ mfa_setup_required: false, mfa_setup_required_org_ids: [], mfa_setup_required_org_count: 0 });
    expect(res.body.organizations[0].organization.require_mfa).toBe(true);
  });

  it('refuses the token once its owner is no longer an active member of its organization', async () => {
    const { orgId } = await t.factories.org();
    const userId = await t.factories.member(orgId, { roles: ['admin'] });
    const token = await t.factories.token(orgId, userId);
    await t.db.updateTable('memberships').set({ status: 'suspended' }).where('org_id', '=', orgId).where('user_id', '=', userId).execute();

    const res = await me({ token });

    expect([res.status, res.body.code]).toEqual([401, 'invalid_token']);
    expect(res.body.detail).toContain('is suspended');
  });

  it('names no other organization of the owner, not even in the second-factor members', async () => {
    const userId = await t.factories.user();
    const strict = await t.factories.org({ name: 'Strict Elsewhere', requireMfa: true, ownerId: userId });
    const { orgId } = await t.factories.org({ ownerId: userId });
    await t.factories.enableTotp(userId);
    const token = await t.factories.token(orgId, userId);

    const res = await me({ token });

    expect(res.body.organizations.map((o: { organization: { id: string } }) => o.organization.id)).toEqual([orgId]);
    expect(res.body).toMatchObject({ can_disable_mfa: true, mfa_disable_blocked_reason: null });
    expect(res.text).not.toContain(strict.orgId);
    expect(res.text).not.toContain('Strict Elsewhere');
  });
});

describe('getCurrentUser: with a session', () => {
  it('describes the session in credential', async () => {
    const userId = await t.factories.user();
    const expiresAt = new Date(Date.now() + 3_600_000);
    const session = await t.factories.session(userId, { expiresAt });
    const row = await t.db.selectFrom('sessions').select('id').where('user_id', '=', userId).executeTakeFirstOrThrow();

    const res = await me({ session });

    expect(row.id).toMatch(/^ses_/);
    expect(res.body.credential).toEqual({ type: 'session', id: row.id, organization_id: null, permissions: null, expires_at: expiresAt.toISOString() });
  });
});

describe('getCurrentUser: second factor required by organizations', () => {
  it('lists the organizations that refuse a session without a second factor', async () => {
    const userId = await t.factories.user();
    const a = await t.factories.org({ ownerId: userId, requireMfa: true });
    const b = await t.factories.org({ requireMfa: true });
    await t.factories.member(b.orgId, { userId });
    await t.factories.org({ ownerId: userId });
    // A suspended membership grants nothing and so refuses nothing.
    const lapsed = await t.factories.org({ requireMfa: true });
    await t.factories.member(lapsed.orgId, { userId, status: 'suspended' });

    const res = await me({ session: await t.factories.session(userId) });

    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      mfa_setup_required: true,
      mfa_setup_required_org_ids: sorted([a.orgId, b.orgId]),
      mfa_setup_required_org_count: 2,
    });
    expect(res.body.organizations).toHaveLength(3);
  });

  it('requires nothing of a session that has shown a second factor', async () => {
    const userId = await t.factories.user();
    await t.factories.org({ ownerId: userId, requireMfa: true });

    const res = await me({ session: await t.factories.session(userId, { secondFactor: true }) });

    expect(res.body).toMatchObject({ mfa_setup_required: false, mfa_setup_required_org_ids: [], mfa_setup_required_org_count: 0 });
  });

  it('requires nothing when no organization of the user requires a second factor', async () => {
    const userId = await t.factories.user();
    await t.factories.org({ ownerId: userId });
    const res = await me({ session: await t.factories.session(userId) });
    expect(res.body).toMatchObject({ mfa_setup_required: false, mfa_setup_required_org_ids: [], mfa_setup_required_org_count: 0 });
  });

  describe('with 55 organizations requiring a second factor', () => {
    let userId: string;
    let session: string;
    let requiring: string[];
    let plainOrgId: string;

    beforeAll(async () => {
      userId = await t.factories.user();
      const created: string[] = [];
      for (let i = 0; i < 55; i += 1) created.push((await t.factories.org({ ownerId: userId, requireMfa: true })).orgId);
      requiring = sorted(created);
      plainOrgId = (await t.factories.org({ ownerId: userId })).orgId;
      session = await t.factories.session(userId);
    });

    it('lists a page of 50 ids in id order and the true count of 55', async () => {
      const res = await me({ session });
      expect(res.status).toBe(200);
      expect(res.body.mfa_setup_required).toBe(true);
      expect(res.body.mfa_setup_required_org_ids).toEqual(requiring.slice(0, 50));
      expect(res.body.mfa_setup_required_org_count).toBe(55);
      expect(res.body.organizations).toHaveLength(56);
    });

    it('puts current_org_id first when it is one of them, even beyond the first 50', async () => {
      const last = requiring[54] as string;
      const res = await me({ session }, { current_org_id: last });
      expect(res.status).toBe(200);
      expect(res.body.mfa_setup_required_org_ids).toHaveLength(50);
      expect(res.body.mfa_setup_required_org_ids).toEqual([last, ...requiring.slice(0, 49)]);
      expect(res.body.mfa_setup_required_org_count).toBe(55);
    });

    it('moves a current_org_id inside the first 50 to the front without repeating it', async () => {
      const tenth = requiring[9] as string;
      const res = await me({ session }, { current_org_id: tenth });
      expect(res.body.mfa_setup_required_org_ids).toEqual([tenth, ...requiring.slice(0, 50).filter((id) => id !== tenth)]);
    });

    it('changes nothing for a current_org_id that is not one of them', async () => {
      const unrelated = await me({ session }, { current_org_id: newId('organization') });
      const plain = await me({ session }, { current_org_id: plainOrgId });
      for (const res of [unrelated, plain]) {
        expect(res.status).toBe(200);
        expect(res.body.mfa_setup_required_org_ids).toEqual(requiring.slice(0, 50));
        expect(res.body.mfa_setup_required_org_count).toBe(55);
      }
    });

    it('refuses a malformed current_org_id', async () => {
      for (const value of ['acme', 'usr_01jg3b7f0m5x2c8v4n6b9t1r3e', 'org_123']) {
        const res = await me({ session }, { current_org_id: value });
        expect(res.status).toBe(400);
        expect(res.body.code).toBe('validation_failed');
        expect(res.body.errors).toEqual([expect.objectContaining({ in: 'query', pointer: '/current_org_id' })]);
      }
    });
  });
});

describe('getCurrentUser: can_disable_mfa', () => {
  it('is false with a reason while an organization requires a second factor and the user has no passkey, true once one exists', async () => {
    const userId = await t.factories.user();
    await t.factories.org({ ownerId: userId, requireMfa: true, name: 'Strict Corp' });
    await t.factories.enableTotp(userId);
    const session = await t.factories.session(userId, { secondFactor: true });

    const blocked = await me({ session });
    expect(blocked.body.can_disable_mfa).toBe(false);
    expect(typeof blocked.body.mfa_disable_blocked_reason).toBe('string');
    expect(blocked.body.mfa_disable_blocked_reason).toContain('Strict Corp');
    expect(blocked.body.mfa_disable_blocked_reason).toMatch(/passkey/);

    await t.factories.passkey(userId);
    const allowed = await me({ session });
    expect(allowed.body).toMatchObject({ can_disable_mfa: true, mfa_disable_blocked_reason: null, passkey_count: 1 });
  });

  it('is true with no reason when no organization requires a second factor', async () => {
    const userId = await t.factories.user();
    await t.factories.org({ ownerId: userId });
    await t.factories.enableTotp(userId);
    const res = await me({ session: await t.factories.session(userId) });
    expect(res.body).toMatchObject({ can_disable_mfa: true, mfa_disable_blocked_reason: null, mfa_enabled: true });
  });

  it('ignores organizations whose membership is suspended', async () => {
    const userId = await t.factories.user();
    const strict = await t.factories.org({ requireMfa: true });
    await t.factories.member(strict.orgId, { userId, status: 'suspended' });
    const res = await me({ session: await t.factories.session(userId) });
    expect(res.body).toMatchObject({ can_disable_mfa: true, mfa_disable_blocked_reason: null });
  });

  it('is computed for the user, the same with an API token', async () => {
    const { orgId, ownerId } = await t.factories.org({ requireMfa: true });
    const token = await t.factories.token(orgId, ownerId);
    const res = await me({ token });
    expect(res.body.can_disable_mfa).toBe(false);
    expect(res.body.mfa_disable_blocked_reason).toEqual(expect.any(String));
  });
});

describe('getCurrentUser: authentication', () => {
  // Without a credential: 401 with the realm's challenge, proven on GET /user/me by guard.test.ts and for every operation by every-operation.test.ts.
  it('answers 401 invalid_token for a revoked token', async () => {
    const { token } = await t.factories.org();
    expect((await me({ token })).status).toBe(200);
    await t.db
      .updateTable('api_tokens')
      .set({ revoked_at: new Date() })
      .where('id', '=', await t.factories.tokenId(token))
      .execute();
    const res = await me({ token });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('invalid_token');
  });

  it('answers 401 invalid_token for an expired token', async () => {
    const { orgId, ownerId } = await t.factories.org();
    const token = await t.factories.token(orgId, ownerId, PERMISSIONS, { expiresAt: new Date(Date.now() - 1000) });
    const res = await me({ token });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('invalid_token');
  });

  it('answers 401 invalid_token for an expired session', async () => {
    const userId = await t.factories.user();
    const session = await t.factories.session(userId, { expiresAt: new Date(Date.now() - 1000) });
    const res = await me({ session });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('invalid_token');
  });
});
