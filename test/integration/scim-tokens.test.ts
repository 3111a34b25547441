import { hashSecret } from '../../src/lib/crypto';
import { createScimToken } from '../../src/operator';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';

/*
 * SCIM tokens: a person creates one for the identity provider (shown once, stored as a hash,
 * with an optional expiry of at most two years), lists them without secrets and revokes them;
 * the token works on /scim/v2 of its own organization only and nowhere else. The operator CLI
 * mints one too.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const TOKEN = /^scim_[A-Za-z0-9]{43}$/;

async function setup(plan = 'enterprise') {
  const org = await t.factories.org();
  await t.db.updateTable('organizations').set({ plan }).where('id', '=', org.orgId).execute();
  const owner = t.as({ session: await t.factories.session(org.ownerId), org: org.orgId });
  return { org, owner };
}

const scim = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

describe('createScimToken', () => {
  it('creates a token shown once, stores its hash, audits it without the secret, and the token works on /scim/v2', async () => {
    const { org, owner } = await setup();
    const expires_at = new Date(Date.now() + 365 * 86_400_000).toISOString();
    const res = await owner.post('/scim-token', { name: 'Okta provisioning', expires_at });
    expect(res.status).toBe(201);
    const { token, scim_token: record } = res.body;
    expect(token).toMatch(TOKEN);
    expect(record).toEqual({
      id: expect.stringMatching(/^scimtok_/),
      name: 'Okta provisioning',
      token_hint: token.slice(-4),
      status: 'active',
      expires_at,
      last_used_at: null,
      created_by_user_id: org.ownerId,
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect(res.headers.get('location')).toBe(`/scim-token/${record.id}`);
    const stored = await t.db.selectFrom('scim_tokens').selectAll().where('id', '=', record.id).executeTakeFirstOrThrow();
    expect(stored.token_hash).toBe(hashSecret(token));
    expect(JSON.stringify(stored)).not.toContain(token);
    const [entry] = await t.factories.auditEntries(org.orgId, 'scim_token.created');
    expect(entry).toMatchObject({ actor_type: 'user', actor_id: org.ownerId, target_type: 'scim_token', target_id: record.id });
    expect(JSON.stringify(entry)).not.toContain(token);

    const users = await t.call('GET', '/scim/v2/Users', undefined, scim(token));
    expect(users.status).toBe(200);
    expect(users.headers.get('content-type')).toMatch(/^application\/scim\+json/);
    expect(users.body.Resources.map((u: { id: string }) => u.id)).toEqual([org.ownerId]);

    // Bound to its organization, for SCIM only: the REST API refuses it.
    expectError(await t.call('GET', `/organization/${org.orgId}`, undefined, { ...scim(token), org: org.orgId }), 401, 'invalid_token');
  });

  it('refuses a plan without scim, a duplicate name, an API token, and an expiry in the past or over two years away', async () => {
    const free = await setup('free');
    expectError(await free.owner.post('/scim-token', { name: 'x' }), 403, 'entitlement_exceeded');
    const { org, owner } = await setup();
    expect((await owner.post('/scim-token', { name: 'Entra' })).status).toBe(201);
    expectError(await owner.post('/scim-token', { name: 'Entra' }), 409, 'name_taken');
    expectError(await t.call('POST', '/scim-token', { name: 'By token' }, { token: org.token, org: org.orgId }), 403, 'requires_person');
    for (const expires_at of [new Date(Date.now() - 60_000).toISOString(), new Date(Date.now() + 800 * 86_400_000).toISOString()]) {
      expectError(await owner.post('/scim-token', { name: 'Bad expiry', expires_at }), 400, 'validation_failed');
    }
    expect(await t.db.selectFrom('scim_tokens').select('id').where('org_id', '=', org.orgId).execute()).toHaveLength(1);
  });
});

describe('listScimTokens and deleteScimToken', () => {
  it('lists without secrets, revokes at once (401 on the next SCIM request), and another organization’s token is 404', async () => {
    const { org, owner } = await setup();
    const a = (await owner.post('/scim-token', { name: 'A' })).body;
    const b = (await owner.post('/scim-token', { name: 'B' })).body;
    expect((await t.call('GET', '/scim/v2/Users', undefined, scim(a.token))).status).toBe(200);
    const listed = await owner.get('/scim-token?limit=1');
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((x: { id: string }) => x.id)).toEqual([a.scim_token.id]);
    const next = await owner.get(`/scim-token?cursor=${listed.body.next_cursor}`);
    expect(next.body.data.map((x: { id: string }) => x.id)).toEqual([b.scim_token.id]);
    expect(JSON.stringify(listed.body) + JSON.stringify(next.body)).not.toContain(a.token.slice(5, 20));

    const other = await setup();
    expectError(await other.owner.delete(`/scim-token/${a.scim_token.id}`), 404, 'not_found');

    expect((await owner.delete(`/scim-token/${a.scim_token.id}`)).status).toBe(204);
    const refused = await t.call('GET', '/scim/v2/Users', undefined, scim(a.token));
    expect(refused.status).toBe(401);
    expect(refused.body).toMatchObject({ schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'], status: '401' });
    expectError(await owner.delete(`/scim-token/${a.scim_token.id}`), 404, 'not_found');
    expect((await t.call('GET', '/scim/v2/Users', undefined, scim(b.token))).status).toBe(200);
    const [entry] = await t.factories.auditEntries(org.orgId, 'scim_token.revoked');
    expect(entry).toMatchObject({ target_id: a.scim_token.id });
  });

  it('an expired token answers 401 and lists as expired', async () => {
    const { org, owner } = await setup();
    const created = (await owner.post('/scim-token', { name: 'Short' })).body;
    await t.db
      .updateTable('scim_tokens')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', created.scim_token.id)
      .execute();
    expect((await t.call('GET', '/scim/v2/Users', undefined, scim(created.token))).status).toBe(401);
    expect((await owner.get('/scim-token')).body.data[0].status).toBe('expired');
    void org;
  });
});

describe('operator CLI: scim-token create', () => {
  it('mints a working token for an organization, audited as the operator', async () => {
    const { org } = await setup();
    const result = await createScimToken(t.db, { orgId: org.orgId, name: 'setup script', expiresInDays: 30 });
    expect(result.scim_token).toMatch(TOKEN);
    expect((await t.call('GET', '/scim/v2/ServiceProviderConfig', undefined, scim(result.scim_token))).status).toBe(200);
    const [entry] = await t.factories.auditEntries(org.orgId, 'scim_token.created');
    expect(entry).toMatchObject({ actor_type: 'operator', target_id: result.token_id });
    await expect(createScimToken(t.db, { orgId: org.orgId, name: 'setup script' })).rejects.toThrow(/already has a SCIM token/);
  });
});
