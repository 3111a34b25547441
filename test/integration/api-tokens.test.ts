import { hashSecret } from '../../src/lib/crypto';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';

/*
 * API tokens over HTTP: a person mints one (shown once, stored as a hash, a ceiling of
 * permissions they hold), lists them (never the secret) and revokes them (refused from the
 * next request on). Managing tokens is a person's action: an API token is refused.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const TOKEN = /^cpt_[A-Za-z0-9_-]{43}$/;
const TOKEN_ID = /^tok_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

/** An organization, its owner's session and a plain member's session. */
async function setup() {
  const org = await t.factories.org();
  const owner = t.as({ session: await t.factories.session(org.ownerId), org: org.orgId });
  const memberId = await t.factories.member(org.orgId, { roles: ['member'] });
  const member = t.as({ session: await t.factories.session(memberId), org: org.orgId });
  return { org, owner, memberId, member };
}

describe('createApiToken', () => {
  it('mints a token shown once, stores only its hash, and records it without the secret', async () => {
    const { org, owner } = await setup();
    const expiresAt = new Date(Date.now() + 30 * 86_400_000).toISOString();
    const res = await owner.post('/api-token', { name: 'CI deploy', permissions: ['toolbox:view', 'organization:view'], expires_at: expiresAt });
    expect(res.status).toBe(201);
    const { token, api_token: record } = res.body;
    expect(token).toMatch(TOKEN);
    expect(record).toEqual({
      id: expect.stringMatching(TOKEN_ID),
      name: 'CI deploy',
      token_hint: token.slice(-4),
      owner_user_id: org.ownerId,
      permissions: ['organization:view', 'toolbox:view'],
      status: 'active',
      expires_at: expiresAt,
      last_used_at: null,
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect(res.headers.get('location')).toBe(`/api-token/${record.id}`);
    const stored = await t.db.selectFrom('api_tokens').selectAll().where('id', '=', record.id).executeTakeFirstOrThrow();
    expect(stored.token_hash).toBe(hashSecret(token));
    expect(JSON.stringify(stored)).not.toContain(token);
    const [entry] = await t.factories.auditEntries(org.orgId, 'api_token.created');
    expect(entry).toMatchObject({
      actor_type: 'user',
      actor_id: org.ownerId,
      target_type: 'api_token',
      target_id: record.id,
      changes: { name: 'CI deploy', permissions: ['organization:view', 'toolbox:view'], expires_at: expiresAt },
    });
    expect(JSON.stringify(entry)).not.toContain(token);

    // It works, as its owner, within its permissions only.
    const byToken = t.as({ token, org: org.orgId });
    expect((await byToken.get(`/organization/${org.orgId}`)).status).toBe(200);
    expectError(await byToken.get('/notification-destination'), 403, 'missing_permission');
  });

  it('refuses permissions the caller does not hold (permission_escalation)', async () => {
    const { member } = await setup();
    expectError(await member.post('/api-token', { name: 'Too much', permissions: ['organization:view', 'organization:manage'] }), 403, 'permission_escalation');
    expect((await member.post('/api-token', { name: 'Enough', permissions: ['organization:view', 'connection:use'] })).status).toBe(201);
  });

  it('takes an expiry in the future and at most 366 days away; an expired token is refused', async () => {
    const { org, owner } = await setup();
    for (const expires_at of [new Date(Date.now() - 60_000).toISOString(), new Date(Date.now() + 367 * 86_400_000).toISOString()]) {
      const res = await owner.post('/api-token', { name: 'Bad expiry', permissions: ['organization:view'], expires_at });
      expectError(res, 400, 'validation_failed');
      expect(res.body.errors).toEqual([{ in: 'body', pointer: '/expires_at', message: expect.any(String) }]);
    }
    const forever = await owner.post('/api-token', { name: 'Forever', permissions: ['organization:view'], expires_at: null });
    expect(forever.body.api_token.expires_at).toBeNull();
    const expired = await t.factories.token(org.orgId, org.ownerId, ['organization:view'], { expiresAt: new Date(Date.now() - 1000) });
    expectError(await t.as({ token: expired, org: org.orgId }).get(`/organization/${org.orgId}`), 401, 'invalid_token');
  });

  it('answers 409 name_taken for a name the caller already uses here; a revoked token frees it', async () => {
    const { owner, member } = await setup();
    const first = await owner.post('/api-token', { name: 'Deploy', permissions: ['organization:view'] });
    expect(first.status).toBe(201);
    expectError(await owner.post('/api-token', { name: 'Deploy', permissions: ['organization:view'] }), 409, 'name_taken');
    // Another member may use the same name.
    expect((await member.post('/api-token', { name: 'Deploy', permissions: ['organization:view'] })).status).toBe(201);
    expect((await owner.delete(`/api-token/${first.body.api_token.id}`)).status).toBe(204);
    expect((await owner.post('/api-token', { name: 'Deploy', permissions: ['organization:view'] })).status).toBe(201);
  });

  it('refuses bad bodies and API tokens', async () => {
    const { org, owner } = await setup();
    for (const body of [
      {},
      { name: 'x' },
      { name: 'x', permissions: [] },
      { name: 'x', permissions: ['nope:nope'] },
      { name: '', permissions: ['organization:view'] },
      { name: 'x', permissions: ['organization:view'], extra: 1 },
    ]) {
      expectError(await owner.post('/api-token', body), 400, 'validation_failed');
    }
    expectError(
      await t.as({ token: org.token, org: org.orgId }).post('/api-token', { name: 'By token', permissions: ['organization:view'] }),
      403,
      'requires_person',
    );
  });
});

describe('listApiTokens', () => {
  it('lists the caller’s own tokens by default, each once across pages, never the secret', async () => {
    const { org, owner, member } = await setup();
    const minted: { token: string; id: string }[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await owner.post('/api-token', { name: `Token ${i}`, permissions: ['organization:view'] });
      minted.push({ token: res.body.token, id: res.body.api_token.id });
    }
    await member.post('/api-token', { name: 'Member token', permissions: ['organization:view'] });
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 10; pages++) {
      const res = await owner.get(`/api-token?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.status).toBe(200);
      for (const m of minted) expect(res.text).not.toContain(m.token);
      seen.push(...res.body.data.map((tok: { id: string }) => tok.id));
      cursor = res.body.next_cursor ?? undefined;
      if (!cursor) break;
    }
    // The factory's token of the owner (SeededOrg.token) is theirs too.
    const factoryTokenId = await t.factories.tokenId(org.token);
    expect(seen).toEqual([factoryTokenId, ...minted.map((m) => m.id)].sort());
  });

  it('shows another member’s tokens, or all, only with member:manage', async () => {
    const { org, owner, memberId, member } = await setup();
    const mine = await member.post('/api-token', { name: 'Mine', permissions: ['organization:view'] });
    expectError(await member.get(`/api-token?user_id=${org.ownerId}`), 403, 'missing_permission');
    expectError(await member.get('/api-token?all=true'), 403, 'missing_permission');
    expect((await member.get(`/api-token?user_id=${memberId}`)).body.data.map((x: { id: string }) => x.id)).toEqual([mine.body.api_token.id]);
    const theirs = await owner.get(`/api-token?user_id=${memberId}`);
    expect(theirs.body.data.map((x: { id: string }) => x.id)).toEqual([mine.body.api_token.id]);
    const all = await owner.get('/api-token?all=true');
    expect(all.body.data.map((x: { owner_user_id: string }) => x.owner_user_id).sort()).toEqual([org.ownerId, memberId].sort());
    const stranger = await t.factories.user();
    expectError(await owner.get(`/api-token?user_id=${stranger}`), 400, 'unknown_reference');
    expectError(await owner.get(`/api-token?all=true&user_id=${memberId}`), 400, 'validation_failed');
  });

  it('tells expired tokens and suspended owners apart, filters by status, and hides revoked ones', async () => {
    const { org, owner, memberId } = await setup();
    const expired = await t.factories.token(org.orgId, org.ownerId, ['organization:view'], { expiresAt: new Date(Date.now() - 1000) });
    const expiredId = await t.factories.tokenId(expired);
    const revoked = await owner.post('/api-token', { name: 'Gone', permissions: ['organization:view'] });
    await owner.delete(`/api-token/${revoked.body.api_token.id}`);
    const suspendedToken = await t.factories.tokenId(await t.factories.token(org.orgId, memberId, ['organization:view']));
    await t.db.updateTable('memberships').set({ status: 'suspended' }).where('org_id', '=', org.orgId).where('user_id', '=', memberId).execute();

    const all = await owner.get('/api-token?all=true');
    const byId = new Map(all.body.data.map((x: { id: string; status: string }) => [x.id, x.status]));
    expect(byId.get(expiredId)).toBe('expired');
    expect(byId.get(suspendedToken)).toBe('owner_suspended');
    expect(byId.has(revoked.body.api_token.id)).toBe(false);
    expect((await owner.get('/api-token?all=true&status=expired')).body.data.map((x: { id: string }) => x.id)).toEqual([expiredId]);
    expect((await owner.get('/api-token?all=true&status=owner_suspended')).body.data.map((x: { id: string }) => x.id)).toEqual([suspendedToken]);
    const active = (await owner.get('/api-token?all=true&status=active')).body.data.map((x: { status: string }) => x.status);
    expect(new Set(active)).toEqual(new Set(['active']));
    expectError(await owner.get('/api-token?status=revoked'), 400, 'validation_failed');
  });

  it('refuses API tokens', async () => {
    const { org } = await setup();
    expectError(await t.as({ token: org.token, org: org.orgId }).get('/api-token'), 403, 'requires_person');
  });
});

describe('revokeApiToken', () => {
  it('revokes at once: the token is refused on its next request, and the revocation is recorded', async () => {
    const { org, owner } = await setup();
    const created = await owner.post('/api-token', { name: 'Short-lived', permissions: ['organization:view'] });
    const byToken = t.as({ token: created.body.token, org: org.orgId });
    expect((await byToken.get(`/organization/${org.orgId}`)).status).toBe(200); // remembered by the server now
    const res = await owner.delete(`/api-token/${created.body.api_token.id}`);
    expect(res.status).toBe(204);
    expectError(await byToken.get(`/organization/${org.orgId}`), 401, 'invalid_token');
    expect((await owner.get('/api-token')).body.data.map((x: { id: string }) => x.id)).not.toContain(created.body.api_token.id);
    const [entry] = await t.factories.auditEntries(org.orgId, 'api_token.revoked');
    expect(entry).toMatchObject({
      actor_type: 'user',
      actor_id: org.ownerId,
      target_type: 'api_token',
      target_id: created.body.api_token.id,
      changes: { name: 'Short-lived' },
    });
    expectError(await owner.delete(`/api-token/${created.body.api_token.id}`), 404, 'not_found');
  });

  it('revokes another member’s token only with member:manage; without it the token is 404', async () => {
    const { org, owner, member, memberId } = await setup();
    const ownerToken = await t.factories.tokenId(org.token);
    expectError(await member.delete(`/api-token/${ownerToken}`), 404, 'not_found');
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).status).toBe(200);
    const theirs = await member.post('/api-token', { name: 'Member', permissions: ['organization:view'] });
    expect((await owner.delete(`/api-token/${theirs.body.api_token.id}`)).status).toBe(204);
    const [entry] = await t.factories.auditEntries(org.orgId, 'api_token.revoked');
    expect(entry?.changes).toMatchObject({ owner_user_id: memberId });
  });

  it('is refused to an API token, even for itself', async () => {
    const { org } = await setup();
    const id = await t.factories.tokenId(org.token);
    expectError(await t.as({ token: org.token, org: org.orgId }).delete(`/api-token/${id}`), 403, 'requires_person');
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).status).toBe(200);
  });
});
