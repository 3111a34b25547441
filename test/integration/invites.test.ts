import { randomBytes } from 'node:crypto';
import { acceptInvite } from '../../src/areas/invites/invites.service';
import { notificationDeliveries } from '../../src/areas/notification-destinations/notification-destinations.consumer';
import { PLANS } from '../../src/access/entitlements';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from '../../src/events/outbox';
import { hashSecret } from '../../src/lib/crypto';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';
import { usePeers } from '../support/peers';

/*
 * The five invite operations over HTTP against the real app, a real SMTP server on loopback
 * receiving the invitations, and acceptance through the emailed link's token by a person
 * with a session (acceptInvite, which activateInvite will call).
 */

const INV = /^inv_[0-7][0-9a-hjkmnp-tv-z]{25}$/;
const peers = usePeers();
let t: TestApp;
let org: SeededOrg;
let other: SeededOrg;
let ownerSession: string;

beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
  org = await t.factories.org();
  other = await t.factories.org();
  ownerSession = await t.factories.session(org.ownerId);
});
afterAll(() => t.close());

const unique = () => randomBytes(4).toString('hex');
const address = (name = 'guest') => `${name}-${unique()}@acme.example`;
const owner = () => t.as({ session: ownerSession, org: org.orgId });
const byToken = () => t.as({ token: org.token, org: org.orgId });

/** The link of the last email to `to`, and its token. */
function linkTo(to: string): { link: string; token: string } {
  const mail = peers.smtp.messages.filter((m) => m.to.includes(to)).at(-1);
  if (!mail) throw new Error(`no email to ${to}`);
  // Quoted-printable: soft line breaks and escaped bytes (`=3D` for `=`).
  const raw = mail.raw.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
  const link = /(http:\/\/127\.0\.0\.1:\d+\/auth\/invite\/activate\?token=[A-Za-z0-9_-]+)/.exec(raw)?.[1];
  if (!link) throw new Error(`no link in the email to ${to}:\n${raw}`);
  return { link, token: new URL(link).searchParams.get('token') as string };
}

const outbox = async (orgId: string, type: string) =>
  (await t.db.selectFrom('outbox').select(['payload']).where('org_id', '=', orgId).where('event_type', '=', type).orderBy('id').execute()).map(
    (e) => e.payload as any,
  );

async function memberWith(orgId: string, roles: string[]) {
  const userId = await t.factories.member(orgId, { roles });
  return { userId, session: await t.factories.session(userId) };
}

describe('createInvite', () => {
  it('emails a link to the activate endpoint, stores only its hash, grants Member by default; audits and emits invite.sent', async () => {
    const email = address('Grace').toUpperCase();
    const teamId = await t.factories.team(org.orgId, `Platform ${unique()}`);
    const res = await owner().post('/invite', { email, team_ids: [teamId], message: 'Welcome aboard.' });
    expect(res.status).toBe(201);
    expect(res.body.id).toMatch(INV);
    expect(res.headers.get('location')).toBe(`/invite/${res.body.id}`);
    expect(res.body).toMatchObject({
      email: email.toLowerCase(),
      roles: [{ id: org.roleIds.member, name: 'Member', is_system: true, seat_class: 'billable' }],
      teams: [{ id: teamId }],
      status: 'pending',
      invited_by_user_id: org.ownerId,
      message: 'Welcome aboard.',
      send_count: 1,
      accepted_at: null,
      accepted_by_user_id: null,
      revoked_at: null,
      revoked_by_user_id: null,
    });
    const days = (Date.parse(res.body.expires_at) - Date.parse(res.body.created_at)) / 86_400_000;
    expect(days).toBeCloseTo(7, 3);

    const { link, token } = linkTo(email.toLowerCase());
    expect(link.startsWith(`${t.url}/auth/invite/activate?token=`)).toBe(true);
    const mail = peers.smtp.messages.filter((m) => m.to.includes(email.toLowerCase())).at(-1)!;
    expect(mail.raw).toContain('Welcome aboard.');
    expect(res.text).not.toContain(token);
    const stored = await t.db.selectFrom('invites').selectAll().where('id', '=', res.body.id).executeTakeFirstOrThrow();
    expect(stored.token_hash).toBe(hashSecret(token));
    expect(JSON.stringify(stored)).not.toContain(token);

    const [audit] = await t.factories.auditEntries(org.orgId, 'invite.created').then((a) => a.filter((e) => e.target_id === res.body.id));
    expect(audit).toMatchObject({
      actor_type: 'user',
      actor_id: org.ownerId,
      target_type: 'invite',
      changes: { email: email.toLowerCase(), role_ids: [org.roleIds.member], team_ids: [teamId] },
    });
    expect(JSON.stringify(audit)).not.toContain(token);
    expect((await outbox(org.orgId, 'invite.sent')).at(-1)).toEqual({
      invite: { id: res.body.id, email: email.toLowerCase(), role_ids: [org.roleIds.member], invited_by_user_id: org.ownerId, expires_at: res.body.expires_at },
      resent: false,
    });
  });

  it('400 validation_failed: missing email, wrong types, unknown members', async () => {
    for (const body of [
      {},
      { email: 'not-an-email' },
      { email: address(), role_ids: 'role' },
      { email: address(), role_ids: [] },
      { email: address(), surprise: true },
      { email: address(), message: 'x'.repeat(501) },
    ]) {
      const res = await byToken().post('/invite', body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
    }
  });

  it('400 unknown_reference for roles and teams that are not this organization’s, pointing at each', async () => {
    const foreignTeam = await t.factories.team(other.orgId, `Other ${unique()}`);
    const res = await byToken().post('/invite', { email: address(), role_ids: [org.roleIds.member, other.roleIds.admin, newId('role')] });
    expect([res.status, res.body.code]).toEqual([400, 'unknown_reference']);
    expect(res.body.errors.map((e: any) => e.pointer)).toEqual(['/role_ids/1', '/role_ids/2']);
    const teams = await byToken().post('/invite', { email: address(), team_ids: [foreignTeam] });
    expect([teams.status, teams.body.code, teams.body.errors[0].pointer]).toEqual([400, 'unknown_reference', '/team_ids/0']);
  });

  it('403 permission_escalation: an Admin cannot invite an Owner, nor anyone a role granting what they lack', async () => {
    const admin = await memberWith(org.orgId, ['admin']);
    const asAdmin = t.as({ session: admin.session, org: org.orgId });
    const owners = await asAdmin.post('/invite', { email: address(), role_ids: [org.roleIds.owner] });
    expect([owners.status, owners.body.code]).toEqual([403, 'permission_escalation']);
    const billing = await asAdmin.post('/invite', { email: address(), role_ids: [org.roleIds.billing_admin] });
    expect([billing.status, billing.body.code]).toEqual([403, 'permission_escalation']);
    expect((await asAdmin.post('/invite', { email: address(), role_ids: [org.roleIds.admin] })).status).toBe(201);

    const inviterRole = await t.factories.customRole(org.orgId, ['invite:manage', 'invite:view']);
    const inviter = await memberWith(org.orgId, [inviterRole]);
    const asInviter = t.as({ session: inviter.session, org: org.orgId });
    const member = await asInviter.post('/invite', { email: address() });
    expect([member.status, member.body.code]).toEqual([403, 'permission_escalation']);
    expect((await asInviter.post('/invite', { email: address(), role_ids: [inviterRole] })).status).toBe(201);
    // A token's own permissions are a ceiling too.
    const narrowToken = await t.factories.token(org.orgId, org.ownerId, ['invite:manage']);
    const narrow = await t.as({ token: narrowToken, org: org.orgId }).post('/invite', { email: address() });
    expect([narrow.status, narrow.body.code]).toEqual([403, 'permission_escalation']);
    // Only an Owner invites an Owner.
    expect((await owner().post('/invite', { email: address(), role_ids: [org.roleIds.owner] })).status).toBe(201);
  });

  it('403 entitlement_exceeded when a billable seat would pass the plan’s seats; pending invites count, free_admin roles do not', async () => {
    const small = await t.factories.org();
    (PLANS as Record<string, unknown>).two_seats = { ...PLANS.free, limits: { ...PLANS.free!.limits, seats: 2 } };
    await t.db.updateTable('organizations').set({ plan: 'two_seats' }).where('id', '=', small.orgId).execute();
    const api = t.as({ token: small.token, org: small.orgId });
    expect((await api.post('/invite', { email: address() })).status).toBe(201);
    const full = await api.post('/invite', { email: address() });
    expect([full.status, full.body.code]).toEqual([403, 'entitlement_exceeded']);
    expect((await api.post('/invite', { email: address(), role_ids: [small.roleIds.auditor] })).status).toBe(201);
  });

  it('lets exactly one of several concurrent invites take the last seat; the others 403 entitlement_exceeded', async () => {
    const small = await t.factories.org();
    (PLANS as Record<string, unknown>).three_seats = { ...PLANS.free, limits: { ...PLANS.free!.limits, seats: 3 } };
    await t.db.updateTable('organizations').set({ plan: 'three_seats' }).where('id', '=', small.orgId).execute();
    const api = t.as({ token: small.token, org: small.orgId });
    // The owner and one pending invite: one seat left.
    expect((await api.post('/invite', { email: address() })).status).toBe(201);
    const racing = await Promise.all(Array.from({ length: 8 }, () => api.post('/invite', { email: address() })));
    expect(racing.map((r) => r.status).sort()).toEqual([201, 403, 403, 403, 403, 403, 403, 403]);
    expect(racing.filter((r) => r.status === 403).map((r) => r.body.code)).toEqual(Array(7).fill('entitlement_exceeded'));
    expect((await api.op('getEntitlements')).body.limits.seats).toEqual({ limit: 3, used: 3 });
  });

  it('409 already_member for a member’s address, 409 invite_pending for a second invite to the same address', async () => {
    const memberEmail = address('member');
    const userId = await t.factories.user({ email: memberEmail });
    await t.factories.member(org.orgId, { userId });
    const member = await byToken().post('/invite', { email: memberEmail.toUpperCase() });
    expect([member.status, member.body.code]).toEqual([409, 'already_member']);
    const email = address();
    expect((await byToken().post('/invite', { email })).status).toBe(201);
    const again = await byToken().post('/invite', { email });
    expect([again.status, again.body.code]).toEqual([409, 'invite_pending']);
    // Another organization may invite the same address.
    expect((await t.as({ token: other.token, org: other.orgId }).post('/invite', { email })).status).toBe(201);
  });

  it('403 missing_permission without invite:manage', async () => {
    const m = await memberWith(org.orgId, ['member']);
    const res = await t.as({ session: m.session, org: org.orgId }).post('/invite', { email: address() });
    expect([res.status, res.body.code]).toEqual([403, 'missing_permission']);
  });
});

describe('listInvites and getInvite', () => {
  it('walks every page once, oldest first; filters by status (expired read from the expiry) and email', async () => {
    const fresh = await t.factories.org();
    const api = t.as({ token: fresh.token, org: fresh.orgId });
    const ids: string[] = [];
    const emails: string[] = [];
    for (let i = 0; i < 5; i += 1) {
      emails.push(address(`p${i}`));
      ids.push((await api.post('/invite', { email: emails[i] })).body.id);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await api.get(`/invite?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.data.map((i: any) => i.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual(ids);

    await t.db
      .updateTable('invites')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', ids[1]!)
      .execute();
    expect((await api.get('/invite?status=expired')).body.data.map((i: any) => i.id)).toEqual([ids[1]]);
    expect((await api.get('/invite?status=pending')).body.data.map((i: any) => i.id)).toEqual([ids[0], ids[2], ids[3], ids[4]]);
    expect((await api.get(`/invite/${ids[1]}`)).body.status).toBe('expired');
    expect((await api.get(`/invite?email=${encodeURIComponent(emails[3]!.toUpperCase())}`)).body.data.map((i: any) => i.id)).toEqual([ids[3]]);
    expect((await api.get('/invite?status=accepted')).body.data).toEqual([]);

    expect([(await api.get('/invite?cursor=bm9wZQ')).body.code]).toEqual(['invalid_cursor']);
    expect((await api.get('/invite?status=lost')).status).toBe(400);
    expect((await api.get('/invite?limit=0')).status).toBe(400);
    expect((await api.get('/invite?whatever=1')).status).toBe(400);
  });

  it('another organization’s invite is 404; a malformed id 400; without invite:view 403', async () => {
    const theirs = await t.as({ token: other.token, org: other.orgId }).post('/invite', { email: address() });
    const res = await byToken().get(`/invite/${theirs.body.id}`);
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await byToken().get('/invite')).body.data.map((i: any) => i.id)).not.toContain(theirs.body.id);
    expect((await byToken().get('/invite/tok_01jg3b7f0r8t2y6v4h1q9p3a5s')).status).toBe(400);
    const m = await memberWith(org.orgId, ['member']);
    const forbidden = await t.as({ session: m.session, org: org.orgId }).get('/invite');
    expect([forbidden.status, forbidden.body.code]).toEqual([403, 'missing_permission']);
  });
});

describe('revokeInvite', () => {
  it('revokes a pending invite: the link stops working; audits and emits invite.revoked; a second revoke is 409', async () => {
    const email = address();
    const created = await owner().post('/invite', { email });
    const { token } = linkTo(email);
    const res = await owner().post(`/invite/${created.body.id}/revoke`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: created.body.id, status: 'revoked', revoked_by_user_id: org.ownerId });
    expect(res.body.revoked_at).not.toBeNull();
    expect((await t.factories.auditEntries(org.orgId, 'invite.revoked')).at(-1)).toMatchObject({ target_id: created.body.id, changes: { email } });
    expect((await outbox(org.orgId, 'invite.revoked')).at(-1)).toEqual({
      invite: { id: created.body.id, email, role_ids: [org.roleIds.member], invited_by_user_id: org.ownerId, expires_at: created.body.expires_at },
    });
    const userId = await t.factories.user({ email });
    expect(await acceptInvite(t.db, token, userId)).toEqual({ ok: false, reason: 'invite_revoked' });
    const again = await owner().post(`/invite/${created.body.id}/revoke`);
    expect([again.status, again.body.code]).toEqual([409, 'invalid_transition']);
  });

  it('an expired invite cannot be revoked; another organization’s is 404 and stays pending; 403', async () => {
    const created = await byToken().post('/invite', { email: address() });
    await t.db
      .updateTable('invites')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', created.body.id)
      .execute();
    const expired = await byToken().post(`/invite/${created.body.id}/revoke`);
    expect([expired.status, expired.body.code]).toEqual([409, 'invalid_transition']);
    const theirs = await t.as({ token: other.token, org: other.orgId }).post('/invite', { email: address() });
    const res = await byToken().post(`/invite/${theirs.body.id}/revoke`);
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await t.as({ token: other.token, org: other.orgId }).get(`/invite/${theirs.body.id}`)).body.status).toBe('pending');
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['invite:view']);
    const forbidden = await t.as({ token: viewer, org: org.orgId }).post(`/invite/${created.body.id}/revoke`);
    expect([forbidden.status, forbidden.body.code]).toEqual([403, 'missing_permission']);
  });
});

describe('resendInvite', () => {
  const backdate = (id: string, ms: number) =>
    t.db
      .updateTable('invites')
      .set({ last_sent_at: new Date(Date.now() - ms) })
      .where('id', '=', id)
      .execute();

  it('is refused with 429 and Retry-After within a minute of the last send', async () => {
    const created = await byToken().post('/invite', { email: address() });
    const res = await byToken().post(`/invite/${created.body.id}/resend`);
    expect([res.status, res.body.code]).toEqual([429, 'rate_limited']);
    const retry = Number(res.headers.get('retry-after'));
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(60);
  });

  it('emails a new link (the old one stops working), renews the expiry of an expired invite; audits invite.resent and emits invite.sent', async () => {
    const email = address();
    const created = await owner().post('/invite', { email });
    const first = linkTo(email);
    await t.db
      .updateTable('invites')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', created.body.id)
      .execute();
    await backdate(created.body.id, 61_000);
    const res = await owner().post(`/invite/${created.body.id}/resend`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: created.body.id, status: 'pending', send_count: 2 });
    expect(Date.parse(res.body.expires_at)).toBeGreaterThan(Date.now() + 6.9 * 86_400_000);
    const second = linkTo(email);
    expect(second.token).not.toBe(first.token);
    const userId = await t.factories.user({ email });
    expect(await acceptInvite(t.db, first.token, userId)).toEqual({ ok: false, reason: 'link_invalid' });
    expect((await t.factories.auditEntries(org.orgId, 'invite.resent')).at(-1)).toMatchObject({
      target_id: created.body.id,
      changes: { send_count: 2, was_expired: true },
    });
    expect((await outbox(org.orgId, 'invite.sent')).at(-1)).toMatchObject({ invite: { id: created.body.id, expires_at: res.body.expires_at }, resent: true });
    expect(await acceptInvite(t.db, second.token, userId)).toMatchObject({ ok: true, orgId: org.orgId, joined: true });
  });

  it('409 invalid_transition for a revoked invite, already_member when the address joined another way; 404 for another organization’s; 403', async () => {
    const revoked = await byToken().post('/invite', { email: address() });
    await byToken().post(`/invite/${revoked.body.id}/revoke`);
    await backdate(revoked.body.id, 61_000);
    const res = await byToken().post(`/invite/${revoked.body.id}/resend`);
    expect([res.status, res.body.code]).toEqual([409, 'invalid_transition']);

    const email = address();
    const joinedOtherwise = await byToken().post('/invite', { email });
    await t.factories.member(org.orgId, { userId: await t.factories.user({ email }) });
    await backdate(joinedOtherwise.body.id, 61_000);
    const member = await byToken().post(`/invite/${joinedOtherwise.body.id}/resend`);
    expect([member.status, member.body.code]).toEqual([409, 'already_member']);

    const theirs = await t.as({ token: other.token, org: other.orgId }).post('/invite', { email: address() });
    await backdate(theirs.body.id, 61_000);
    expect((await byToken().post(`/invite/${theirs.body.id}/resend`)).status).toBe(404);
    expect((await t.as({ token: other.token, org: other.orgId }).get(`/invite/${theirs.body.id}`)).body.send_count).toBe(1);
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['invite:view']);
    expect((await t.as({ token: viewer, org: org.orgId }).post(`/invite/${theirs.body.id}/resend`)).body.code).toBe('missing_permission');
  });
});

describe('accepting through the emailed link', () => {
  it('a signed-in person with the invited address becomes a member with the roles and teams; audits invite.accepted, emits member.joined', async () => {
    const email = address('ada');
    const teamId = await t.factories.team(org.orgId, `Data ${unique()}`);
    const created = await owner().post('/invite', { email, role_ids: [org.roleIds.auditor], team_ids: [teamId] });
    const { token } = linkTo(email);
    const userId = await t.factories.user({ email: email.toUpperCase(), name: 'Ada' });
    const session = await t.factories.session(userId);
    // Not a member yet: the organization refuses the session.
    expect((await t.as({ session, org: org.orgId }).get('/audit-log')).body.code).toBe('not_a_member');

    expect(await acceptInvite(t.db, token, userId, { requestId: 'req_test' })).toEqual({
      ok: true,
      orgId: org.orgId,
      inviteId: created.body.id,
      userId,
      joined: true,
    });
    t.credentials.clear();
    const me = await t.as({ session }).get('/user/me');
    const membership = me.body.organizations.find((o: any) => o.organization.id === org.orgId);
    expect(membership.roles.map((r: any) => r.id)).toEqual([org.roleIds.auditor]);
    expect(membership.teams.map((tm: any) => tm.id)).toEqual([teamId]);
    expect(membership.member).toMatchObject({ user_id: userId, status: 'active', via: 'invite' });
    expect((await t.as({ session, org: org.orgId }).get('/audit-log')).status).toBe(200);

    const invite = await owner().get(`/invite/${created.body.id}`);
    expect(invite.body).toMatchObject({ status: 'accepted', accepted_by_user_id: userId });
    expect((await t.factories.auditEntries(org.orgId, 'invite.accepted')).at(-1)).toMatchObject({
      actor_type: 'user',
      actor_id: userId,
      target_type: 'invite',
      target_id: created.body.id,
      request_id: 'req_test',
      changes: { email, joined: true, role_ids: [org.roleIds.auditor], team_ids: [teamId] },
    });
    expect((await outbox(org.orgId, 'member.joined')).at(-1)).toEqual({ member: { user_id: userId, email: email.toUpperCase(), name: 'Ada' }, via: 'invite' });
    // The link works once.
    expect(await acceptInvite(t.db, token, userId)).toEqual({ ok: false, reason: 'link_invalid' });
    const revoke = await owner().post(`/invite/${created.body.id}/revoke`);
    expect([revoke.status, revoke.body.code]).toEqual([409, 'invalid_transition']);
  });

  it('refuses another person, an expired link and an unknown one', async () => {
    const email = address();
    await byToken().post('/invite', { email });
    const { token } = linkTo(email);
    const someoneElse = await t.factories.user();
    expect(await acceptInvite(t.db, token, someoneElse)).toEqual({ ok: false, reason: 'invite_email_mismatch' });
    expect(await acceptInvite(t.db, 'cpinv_unknown_token_of_some_length', someoneElse)).toEqual({ ok: false, reason: 'link_invalid' });
    await t.db
      .updateTable('invites')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('token_hash', '=', hashSecret(token))
      .execute();
    expect(await acceptInvite(t.db, token, await t.factories.user({ email }))).toEqual({ ok: false, reason: 'link_expired' });
  });

  it('the Member role when the invite’s roles were deleted since; a removed member joins again', async () => {
    const role = await t.factories.customRole(org.orgId, ['member:view']);
    const email = address();
    const userId = await t.factories.user({ email });
    await t.factories.member(org.orgId, { userId, status: 'removed', roles: [] });
    await byToken().post('/invite', { email, role_ids: [role] });
    await t.db.deleteFrom('roles').where('id', '=', role).execute();
    expect(await acceptInvite(t.db, linkTo(email).token, userId)).toMatchObject({ ok: true, joined: true });
    const roles = await t.db.selectFrom('role_assignments').select('role_id').where('org_id', '=', org.orgId).where('user_id', '=', userId).execute();
    expect(roles.map((r) => r.role_id)).toEqual([org.roleIds.member]);
    const membership = await t.db
      .selectFrom('memberships')
      .select(['status', 'via'])
      .where('org_id', '=', org.orgId)
      .where('user_id', '=', userId)
      .executeTakeFirstOrThrow();
    expect(membership).toEqual({ status: 'active', via: 'invite' });
  });
});

describe('events to a real receiver', () => {
  it('invite.sent, invite.revoked and member.joined reach a subscribed destination through the outbox', async () => {
    const fresh = await t.factories.org();
    const api = t.as({ token: fresh.token, org: fresh.orgId });
    const hook = `${peers.receiver.url}/services/T${unique()}/B${unique()}/${unique()}`;
    const dest = await api.post('/notification-destination', {
      name: 'Invites',
      type: 'slack',
      config: { webhook_url: hook },
      event_types: ['invite.sent', 'invite.revoked', 'member.joined'],
    });
    expect(dest.status).toBe(201);
    const email = address();
    const sent = await api.post('/invite', { email });
    const userId = await t.factories.user({ email });
    await acceptInvite(t.db, linkTo(email).token, userId);
    const revoked = await api.post('/invite', { email: address() });
    await api.post(`/invite/${revoked.body.id}/revoke`);

    const dispatcher = new OutboxDispatcher(t.db, [notificationDeliveries(t.deps)], t.deps.logger, DEFAULT_OUTBOX_OPTIONS);
    // Earlier tests left events of other organizations in the outbox: rounds until all are fanned out.
    while ((await dispatcher.runOnce()).fannedOut > 0);
    const posts = peers.receiver.requests.filter((r) => hook.endsWith(r.path)).map((r) => JSON.parse(r.body).text as string);
    expect(posts).toHaveLength(4);
    expect(posts.filter((p) => p.includes('invite.sent'))).toHaveLength(2);
    expect(posts.find((p) => p.includes('member.joined'))).toContain(userId);
    expect(posts.find((p) => p.includes('invite.revoked'))).toContain(revoked.body.id);
    expect(posts.some((p) => p.includes(sent.body.id))).toBe(true);
  });
});

describe('activateInvite and acceptInviteLink (the emailed link, then the invite page’s button)', () => {
  const open = (link: string, session?: string) => t.call('GET', new URL(link).pathname + new URL(link).search, undefined, { session });
  const accept = (token: string, session?: string, headers: Record<string, string> = {}) =>
    t.call('POST', '/auth/invite/activate', undefined, {
      session,
      raw: new URLSearchParams({ token }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    });
  const slugOf = async (orgId: string) => (await t.db.selectFrom('organizations').select('slug').where('id', '=', orgId).executeTakeFirstOrThrow()).slug;

  it('opening the link (as a mail scanner does) accepts nothing: it shows the invite page', async () => {
    const email = address('scanned');
    const created = await owner().post('/invite', { email });
    const { link, token } = linkTo(email);
    for (let i = 0; i < 2; i += 1) {
      const res = await open(link);
      expect(res.status).toBe(302);
      expect(res.headers.get('location')).toBe(`${t.url}/invite/accept?token=${token}`);
      expect(res.headers.get('set-cookie')).toBeNull();
    }
    expect((await owner().get(`/invite/${created.body.id}`)).body.status).toBe('pending');
    expect(await t.db.selectFrom('users').select('id').where('email', '=', email).execute()).toEqual([]);
    const page = await (await fetch(`${t.url}/invite/accept?token=${token}`)).text();
    expect(page).toContain(`You were invited as <strong>${email}</strong>`);
    expect(page).toContain('<form method="post" action="/auth/invite/activate">');
  });

  it('signed in as the invited address: joins and lands on the organization in the web app', async () => {
    const email = address('signed-in');
    const created = await owner().post('/invite', { email });
    const userId = await t.factories.user({ email });
    const session = await t.factories.session(userId);
    const res = await accept(linkTo(email).token, session);
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`${t.url}/org/${await slugOf(org.orgId)}`);
    expect(res.headers.get('set-cookie')).toBeNull();
    expect((await owner().get(`/invite/${created.body.id}`)).body).toMatchObject({ status: 'accepted', accepted_by_user_id: userId });
    const me = await t.as({ session }).get('/user/me');
    expect(me.body.organizations.map((o: any) => o.organization.id)).toContain(org.orgId);
    expect((await t.factories.auditEntries(org.orgId, 'invite.accepted')).at(-1)).toMatchObject({
      actor_id: userId,
      target_id: created.body.id,
      request_id: res.headers.get('x-request-id'),
    });
    // Used up: the same link again is link_invalid.
    const again = await accept(linkTo(email).token, session);
    expect(again.headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
    expect((await open(linkTo(email).link)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
  });

  it('a new address: the account is made and signed in (the cookie works), then joins', async () => {
    const email = address('newcomer');
    await owner().post('/invite', { email });
    const res = await accept(linkTo(email).token);
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`${t.url}/org/${await slugOf(org.orgId)}`);
    const cookie = res.headers.get('set-cookie') ?? '';
    expect(cookie).toMatch(/^__Host-cp_session=cps_[A-Za-z0-9_-]+; Path=\/; HttpOnly; Secure; SameSite=Lax; Max-Age=2592000$/);
    const session = /^__Host-cp_session=([^;]+)/.exec(cookie)![1]!;
    const me = await t.as({ session }).get('/user/me');
    expect(me.body.email).toBe(email);
    expect(me.body.organizations.find((o: any) => o.organization.id === org.orgId).member).toMatchObject({ via: 'invite', status: 'active' });
  });

  it('an organization that requires a second factor: a newcomer goes to set one up first, back to the organization after', async () => {
    const strict = await t.factories.org({ requireMfa: true });
    const email = address('strict');
    await t.as({ token: strict.token, org: strict.orgId }).post('/invite', { email });
    const res = await accept(linkTo(email).token);
    const location = new URL(res.headers.get('location')!);
    expect(location.pathname).toBe('/account/security');
    expect(location.searchParams.get('return_to')).toBe(`/org/${await slugOf(strict.orgId)}`);
  });

  it('a new address accepting several times at once: one account, one membership, never a 5xx', async () => {
    const email = address('hurried');
    await owner().post('/invite', { email });
    const { token } = linkTo(email);
    const answers = await Promise.all([accept(token), accept(token), accept(token)]);
    expect(answers.map((a) => a.status)).toEqual([303, 303, 303]);
    const landed = `${t.url}/org/${await slugOf(org.orgId)}`;
    expect(answers.filter((a) => a.headers.get('location') === landed)).toHaveLength(1);
    const accounts = await t.db.selectFrom('users').select('id').where('email', '=', email).execute();
    expect(accounts).toHaveLength(1);
    const memberships = await t.db.selectFrom('memberships').select('user_id').where('org_id', '=', org.orgId).where('user_id', '=', accounts[0]!.id).execute();
    expect(memberships).toHaveLength(1);
  });

  it('403 insufficient_access when another site’s page sends the button, and the invite still works from ours', async () => {
    const email = address('csrf');
    await owner().post('/invite', { email });
    const { token } = linkTo(email);
    const refused = await accept(token, undefined, { origin: 'https://evil.example' });
    expect([refused.status, refused.body.code]).toEqual([403, 'insufficient_access']);
    expect((await accept(token, undefined, { origin: new URL(t.url).origin })).status).toBe(303);
  });

  it('an address with an account but no session is sent to sign in, with the invite page as return_to; failures land on the sign-in page with the reason', async () => {
    const email = address('returning');
    await t.factories.user({ email });
    await owner().post('/invite', { email });
    const { token } = linkTo(email);
    const res = await accept(token);
    expect(res.status).toBe(303);
    const location = new URL(res.headers.get('location')!);
    expect(location.pathname).toBe('/sign-in');
    expect(location.searchParams.get('return_to')).toBe(`/invite/accept?token=${token}`);
    // A stale or unknown session cookie counts as signed out: the same redirect, not a 401.
    const stale = await accept(token, `cps_${'x'.repeat(43)}`);
    expect([stale.status, stale.headers.get('location')]).toEqual([303, res.headers.get('location')]);

    const someoneElse = await t.factories.session(await t.factories.user());
    expect((await accept(token, someoneElse)).headers.get('location')).toBe(`${t.url}/sign-in?error=invite_email_mismatch`);
    expect((await open(`${t.url}/auth/invite/activate?token=cpinv_${'x'.repeat(43)}`)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
    expect((await accept(`cpinv_${'x'.repeat(43)}`)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
    const revoked = await owner().post('/invite', { email: address() });
    const revokedLink = linkTo(revoked.body.email).link;
    await owner().post(`/invite/${revoked.body.id}/revoke`);
    expect((await open(revokedLink)).headers.get('location')).toBe(`${t.url}/sign-in?error=invite_revoked`);
    const expired = await owner().post('/invite', { email: address() });
    await t.db
      .updateTable('invites')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', expired.body.id)
      .execute();
    expect((await open(linkTo(expired.body.email).link)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_expired`);
    const malformed = await t.call('GET', '/auth/invite/activate?token=short');
    expect([malformed.status, malformed.body.code]).toEqual([400, 'validation_failed']);
    expect((await t.call('GET', '/auth/invite/activate')).status).toBe(400);
  });
});
