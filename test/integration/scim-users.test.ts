import { createHash, randomBytes } from 'node:crypto';
import { scimPatch, type ScimPatchOperation } from 'scim-patch';
import { startTestApp, type TestApp } from '../support/app';
import { mintMcpServer } from '../support/mcp';
import { entra } from '../fixtures/scim/entra';
import { okta } from '../fixtures/scim/okta';

/*
 * /scim/v2/Users as Okta and Microsoft Entra ID drive it: their documented request sequences
 * (test/fixtures/scim) replayed step by step, PATCH results checked against scim-patch as an
 * independent oracle, and deprovisioning checked by trying every credential the person had.
 * Every response is checked against the spec by the test client.
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
  const created = await t.call('POST', '/scim-token', { name: `IdP ${unique()}` }, { session, org: org.orgId });
  expect(created.status).toBe(201);
  const token = created.body.token as string;
  const idp = {
    get: (path: string, headers: Record<string, string> = {}) => t.call('GET', path, undefined, { headers: { authorization: `Bearer ${token}`, ...headers } }),
    send: (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
      t.call(method, path, body, { headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json', ...headers } }),
  };
  return { org, token, idp };
}

const person = () => {
  const n = unique();
  return { userName: `ada.${n}@acme.example`, givenName: 'Ada', familyName: 'Lovelace', externalId: `00u${n}` };
};

/** What scim-patch makes of a resource for a PatchOp, on the attributes this service keeps. */
function oracle(resource: Record<string, unknown>, operations: ScimPatchOperation[]) {
  const kept = operations.filter((o) => !(o as { path?: string }).path?.startsWith('urn:ietf:params:scim:schemas:extension'));
  const patched = scimPatch(structuredClone(resource) as never, kept) as Record<string, unknown>;
  if (typeof patched.active === 'string') patched.active = patched.active.toLowerCase() === 'true';
  return kept.length === 0 ? resource : patched;
}
const comparable = (user: Record<string, unknown>) => {
  const { userName, name, displayName, emails, active, externalId } = user;
  return { userName, name, displayName, emails, active, externalId };
};

describe('Okta provisioning run', () => {
  it('replays Okta: probe, create, get, PUT, deactivate, reactivate', async () => {
    const { org, idp } = await provisioned();
    const p = person();

    // Okta step 1: probe by userName: nothing yet.
    const probe = await idp.get(okta.probe(p));
    expect(probe.status).toBe(200);
    expect(probe.body).toEqual({
      schemas: ['urn:ietf:params:scim:api:messages:2.0:ListResponse'],
      totalResults: 0,
      startIndex: 1,
      itemsPerPage: 0,
      Resources: [],
    });

    // Okta step 2: create.
    const created = await idp.send('POST', '/scim/v2/Users', okta.create(p));
    expect(created.status).toBe(201);
    expect(created.headers.get('content-type')).toMatch(/^application\/scim\+json/);
    const id = created.body.id as string;
    expect(created.body).toMatchObject({
      userName: p.userName,
      externalId: p.externalId,
      name: { givenName: 'Ada', familyName: 'Lovelace' },
      active: true,
      groups: [],
      meta: { resourceType: 'User', location: `${t.url}/scim/v2/Users/${id}` },
    });
    expect(created.body.password).toBeUndefined();
    expect(created.headers.get('location')).toBe(`${t.url}/scim/v2/Users/${id}`);
    expect(created.headers.get('etag')).toBe(created.body.meta.version);
    const member = await t.db.selectFrom('memberships').selectAll().where('org_id', '=', org.orgId).where('user_id', '=', id).executeTakeFirstOrThrow();
    expect(member).toMatchObject({ status: 'active', via: 'scim', external_id: p.externalId });
    const [audit] = await t.factories.auditEntries(org.orgId, 'scim_user.created');
    expect(audit).toMatchObject({ actor_type: 'scim', target_id: id });

    // Okta step 1 again: now it is found; the same create again is 409 uniqueness.
    expect((await idp.get(okta.probe(p))).body.Resources.map((u: { id: string }) => u.id)).toEqual([id]);
    const again = await idp.send('POST', '/scim/v2/Users', okta.create(p));
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ schemas: [ERROR], status: '409', scimType: 'uniqueness' });

    // Okta step 3: get.
    const got = await idp.get(`/scim/v2/Users/${id}`);
    expect(got.status).toBe(200);
    expect(got.body).toEqual(created.body);

    // Okta step 4: PUT the whole profile, with the current version in If-Match.
    const put = await idp.send('PUT', `/scim/v2/Users/${id}`, okta.replace(p, id, 'Byron'), { 'if-match': got.body.meta.version });
    expect(put.status).toBe(200);
    expect(put.body.name).toEqual({ givenName: 'Ada', familyName: 'Byron' });
    expect(put.body.displayName).toBe('Ada Byron');
    expect(put.body.meta.version).not.toBe(got.body.meta.version);
    // The old version no longer matches: 412, and nothing changes.
    const stale = await idp.send('PUT', `/scim/v2/Users/${id}`, okta.replace(p, id, 'Stale'), { 'if-match': got.body.meta.version });
    expect(stale.status).toBe(412);
    expect(stale.body).toMatchObject({ schemas: [ERROR], status: '412' });
    expect((await idp.get(`/scim/v2/Users/${id}`)).body.name.familyName).toBe('Byron');

    // Okta step 5: deactivate, checked against scim-patch.
    const before = (await idp.get(`/scim/v2/Users/${id}`)).body;
    const off = await idp.send('PATCH', `/scim/v2/Users/${id}`, okta.deactivate);
    expect(off.status).toBe(200);
    expect(comparable(off.body)).toEqual(comparable(oracle(before, okta.deactivate.Operations as ScimPatchOperation[])));
    expect(off.body.active).toBe(false);
    expect(
      await t.db
        .selectFrom('memberships')
        .select(['status', 'status_reason'])
        .where('org_id', '=', org.orgId)
        .where('user_id', '=', id)
        .executeTakeFirstOrThrow(),
    ).toEqual({ status: 'suspended', status_reason: 'scim_deactivated' });
    // Still listed, as inactive.
    const inactive = await idp.get(`/scim/v2/Users?filter=${encodeURIComponent('active eq false')}`);
    expect(inactive.body.Resources.map((u: { id: string }) => u.id)).toEqual([id]);

    // Okta step 6: reactivate.
    const on = await idp.send('PATCH', `/scim/v2/Users/${id}`, okta.reactivate);
    expect(on.status).toBe(200);
    expect(on.body.active).toBe(true);
    expect(
      (await t.db.selectFrom('memberships').select('status').where('org_id', '=', org.orgId).where('user_id', '=', id).executeTakeFirstOrThrow()).status,
    ).toBe('active');
  });
});

describe('Entra provisioning run', () => {
  it('replays Entra: probes, create, PATCH forms, userName change, soft delete with "False", hard delete', async () => {
    const { org, idp } = await provisioned();
    const p = person();

    // Entra step 1: probes by userName and externalId: empty lists.
    for (const path of [entra.probeUserName(p.userName), entra.probeExternalId(p.externalId)]) {
      const res = await idp.get(path);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ totalResults: 0, Resources: [] });
    }

    // Entra step 2: create, with the enterprise extension and attributes not kept.
    const created = await idp.send('POST', '/scim/v2/Users', entra.create(p));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    expect(created.body.roles).toBeUndefined();
    expect(created.body.addresses).toBeUndefined();
    expect((await idp.get(entra.probeExternalId(p.externalId))).body.Resources.map((u: { id: string }) => u.id)).toEqual([id]);
    expect((await idp.get(entra.probeUserName(p.userName.toUpperCase()))).body.totalResults).toBe(1);

    // Entra step 3: capitalised ops, emails[type eq "work"].value, name.familyName, an extension attribute: as scim-patch applies them.
    const before = (await idp.get(`/scim/v2/Users/${id}`)).body;
    const update = entra.updateAttributes(`ada.new.${unique()}@acme.example`, 'Byron');
    const patched = await idp.send('PATCH', `/scim/v2/Users/${id}`, update);
    expect(patched.status).toBe(200);
    expect(comparable(patched.body)).toEqual(comparable(oracle(before, update.Operations as ScimPatchOperation[])));

    // A work email replaced on a person without one is added (Entra's known quirk), not noTarget.
    const noWork = await idp.send('PUT', `/scim/v2/Users/${id}`, { ...entra.create(p), emails: [{ type: 'home', value: p.userName, primary: true }] });
    expect(noWork.status).toBe(200);
    const add = {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [{ op: 'Replace', path: 'emails[type eq "work"].value', value: 'work@acme.example' }],
    };
    const added = await idp.send('PATCH', `/scim/v2/Users/${id}`, add);
    expect(added.status).toBe(200);
    expect(added.body.emails).toEqual([
      { type: 'home', value: p.userName, primary: true },
      { type: 'work', value: 'work@acme.example' },
    ]);

    // Entra step 4: userName changes; the new one is found, the old one is not.
    const renamed = `ada.renamed.${unique()}@acme.example`;
    expect((await idp.send('PATCH', `/scim/v2/Users/${id}`, entra.updateUserName(renamed))).body.userName).toBe(renamed);
    expect((await idp.get(entra.probeUserName(renamed))).body.totalResults).toBe(1);
    expect((await idp.get(entra.probeUserName(p.userName))).body.totalResults).toBe(0);

    // Entra step 5: soft delete with "False"; then "True" restores.
    expect((await idp.send('PATCH', `/scim/v2/Users/${id}`, entra.disable)).body.active).toBe(false);
    expect((await idp.send('PATCH', `/scim/v2/Users/${id}`, entra.enable)).body.active).toBe(true);
    expect((await idp.send('PATCH', `/scim/v2/Users/${id}`, entra.disable)).body.active).toBe(false);

    // Entra step 6: hard delete: the membership is removed, the account stays, the id is 404 after.
    const deleted = await idp.send('DELETE', `/scim/v2/Users/${id}`);
    expect(deleted.status).toBe(204);
    const member = await t.db.selectFrom('memberships').selectAll().where('org_id', '=', org.orgId).where('user_id', '=', id).executeTakeFirstOrThrow();
    expect(member).toMatchObject({ status: 'removed', status_reason: 'scim_deprovisioned', external_id: null });
    expect(await t.db.selectFrom('users').select('id').where('id', '=', id).executeTakeFirst()).toBeDefined();
    const gone = await idp.get(`/scim/v2/Users/${id}`);
    expect(gone.status).toBe(404);
    expect(gone.body).toMatchObject({ schemas: [ERROR], status: '404' });
    expect((await idp.send('DELETE', `/scim/v2/Users/${id}`)).status).toBe(404);
    expect(await t.factories.auditEntries(org.orgId, 'scim_user.deleted')).toHaveLength(1);

    // Provisioned again later: a fresh membership for the same account.
    const back = await idp.send('POST', '/scim/v2/Users', entra.create(p));
    expect(back.status).toBe(201);
    expect(back.body.id).toBe(id);
  });
});

describe('deprovisioning means it', () => {
  const pkce = () => {
    const verifier = randomBytes(32).toString('base64url');
    return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
  };
  const REDIRECT = 'http://127.0.0.1:33418/callback';
  const form = (values: Record<string, string>) => ({
    raw: new URLSearchParams(values).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });

  /** An OAuth access and refresh token for the person's MCP server, through authorize → consent → token. */
  async function oauthTokens(session: string, resource: string) {
    const client = await t.call('POST', '/oauth/register', { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none', client_name: 'SCIM test client' });
    const { verifier, challenge } = pkce();
    const query = new URLSearchParams({
      response_type: 'code',
      client_id: client.body.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 's',
      resource,
    });
    const start = await t.call('GET', `/oauth/authorize?${query.toString()}`, undefined, { session });
    let location = new URL(start.headers.get('location')!);
    if (location.pathname === '/oauth/consent') {
      const headers = { cookie: `__Host-cp_session=${session}`, origin: new URL(t.url).origin, 'sec-fetch-site': 'same-origin' };
      const decided = await t.call('POST', '/oauth/consent/decision', undefined, {
        ...form({ request: location.searchParams.get('request')!, decision: 'approve' }),
        headers: { ...form({}).headers, ...headers },
      });
      location = new URL(decided.headers.get('location')!);
    }
    const res = await t.call(
      'POST',
      '/oauth/token',
      undefined,
      form({
        grant_type: 'authorization_code',
        code: location.searchParams.get('code')!,
        code_verifier: verifier,
        redirect_uri: REDIRECT,
        client_id: client.body.client_id,
        resource,
      }),
    );
    expect(res.status).toBe(200);
    return { access: res.body.access_token as string, refresh: res.body.refresh_token as string, clientId: client.body.client_id as string };
  }

  const mcp = (resource: string, token: string) =>
    fetch(resource, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
      }),
    });

  async function personWithCredentials() {
    const ctx = await provisioned();
    const userId = await t.factories.member(ctx.org.orgId);
    const apiToken = await t.factories.token(ctx.org.orgId, userId);
    const server = await mintMcpServer(t, { token: apiToken, org: ctx.org.orgId });
    const session = await t.factories.session(userId);
    const resource = `${t.url}/mcp/${server.id}`;
    const oauth = await oauthTokens(session, resource);
    const email = (await t.db.selectFrom('users').select('email').where('id', '=', userId).executeTakeFirstOrThrow()).email;
    // The identity provider takes the existing member over: 201 with their own id.
    const taken = await ctx.idp.send('POST', '/scim/v2/Users', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      userName: email,
      externalId: `ext-${unique()}`,
    });
    expect(taken.status).toBe(201);
    expect(taken.body.id).toBe(userId);
    const works = async () => ({
      api: (await t.call('GET', `/organization/${ctx.org.orgId}`, undefined, { token: apiToken, org: ctx.org.orgId })).status,
      session: (await t.call('GET', `/organization/${ctx.org.orgId}`, undefined, { session, org: ctx.org.orgId })).status,
      mcpToken: (await mcp(resource, server.token)).status,
      oauth: (await mcp(resource, oauth.access)).status,
    });
    expect(await works()).toEqual({ api: 200, session: 200, mcpToken: 200, oauth: 200 });
    return { ...ctx, userId, works, oauth, resource };
  }

  it('active:false stops the API token, the session in the organization, the MCP server token and the OAuth grant', async () => {
    const { idp, userId, works, oauth, org } = await personWithCredentials();
    const off = await idp.send('PATCH', `/scim/v2/Users/${userId}`, okta.deactivate);
    expect(off.status).toBe(200);
    const after = await works();
    expect(after.api).toBe(401);
    expect(after.session).toBe(403);
    expect(after.mcpToken).toBe(401);
    expect(after.oauth).toBe(401);
    const grants = await t.db.selectFrom('oauth_grants').select('revoked_at').where('org_id', '=', org.orgId).where('user_id', '=', userId).execute();
    expect(grants.length).toBeGreaterThan(0);
    expect(grants.every((g) => g.revoked_at !== null)).toBe(true);
    // The refresh token is gone with the grant.
    const refreshed = await t.call(
      'POST',
      '/oauth/token',
      undefined,
      form({ grant_type: 'refresh_token', refresh_token: oauth.refresh, client_id: oauth.clientId }),
    );
    expect(refreshed.status).toBe(400);
    const [entry] = await t.factories.auditEntries(org.orgId, 'scim_user.updated');
    expect(entry).toMatchObject({ actor_type: 'scim', changes: { status: { from: 'active', to: 'suspended' }, oauth_grants_revoked: 1 } });
  });

  it('PUT turns a person off and on again as the identity provider says (member.removed, then member.joined)', async () => {
    const { org, idp } = await provisioned();
    const created = await idp.send('POST', '/scim/v2/Users', okta.create(person()));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const off = await idp.send('PUT', `/scim/v2/Users/${id}`, { ...created.body, active: false });
    expect([off.status, off.body.active]).toEqual([200, false]);
    const on = await idp.send('PUT', `/scim/v2/Users/${id}`, { ...off.body, active: true });
    expect([on.status, on.body.active]).toEqual([200, true]);
    const events = await t.db.selectFrom('outbox').select(['event_type', 'payload']).where('org_id', '=', org.orgId).orderBy('id').execute();
    const about = events.filter((e) => (e.payload as { member?: { user_id?: string } }).member?.user_id === id).map((e) => e.event_type);
    expect(about).toEqual(['member.joined', 'member.removed', 'member.joined']);
  });

  it('DELETE removes the membership through the member-removed hooks: API tokens revoked, MCP servers deleted', async () => {
    const { idp, userId, works, org } = await personWithCredentials();
    expect((await idp.send('DELETE', `/scim/v2/Users/${userId}`)).status).toBe(204);
    const after = await works();
    expect(after).toEqual({ api: 401, session: 403, mcpToken: 401, oauth: 401 });
    expect(
      await t.db.selectFrom('api_tokens').select('id').where('org_id', '=', org.orgId).where('user_id', '=', userId).where('revoked_at', 'is', null).execute(),
    ).toEqual([]);
    expect(await t.db.selectFrom('mcp_servers').select('id').where('org_id', '=', org.orgId).where('owner_user_id', '=', userId).execute()).toEqual([]);
  });

  it('the last active Owner is neither suspended nor removed (409 in SCIM form), and nothing changes', async () => {
    const { org, idp } = await provisioned();
    for (const [method, body] of [
      ['PATCH', okta.deactivate],
      ['DELETE', undefined],
    ] as const) {
      const res = await idp.send(method, `/scim/v2/Users/${org.ownerId}`, body);
      expect(res.status).toBe(409);
      expect(res.body).toMatchObject({ schemas: [ERROR], status: '409' });
    }
    expect((await t.db.selectFrom('memberships').select('status').where('user_id', '=', org.ownerId).executeTakeFirstOrThrow()).status).toBe('active');
  });
});

describe('the SCIM wire', () => {
  it('answers random, malformed and foreign ids with SCIM 404, ignores unknown query parameters, and refuses other filters with invalidFilter', async () => {
    const { idp } = await provisioned();
    const other = await provisioned();
    for (const id of ['2819c223-7f76-453a-919d-413861904646', 'usr_00000000000000000000000000', other.org.ownerId]) {
      const res = await idp.get(`/scim/v2/Users/${id}`);
      expect(res.status).toBe(404);
      expect(res.body).toMatchObject({ schemas: [ERROR], status: '404' });
    }
    const sorted = await idp.get('/scim/v2/Users?sortBy=userName&sortOrder=descending&foo=bar');
    expect(sorted.status).toBe(200);
    for (const filter of ['userName sw "a"', 'userName eq "a" or active eq true', 'title eq "x"', 'userName eq', 'active eq "yes"']) {
      const res = await idp.get(`/scim/v2/Users?filter=${encodeURIComponent(filter)}`);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ schemas: [ERROR], status: '400', scimType: 'invalidFilter' });
    }
  });

  it('pages with startIndex and count (below 1 is 1, negative count is 0, capped at 200), and projects attributes', async () => {
    const { org, idp } = await provisioned();
    const ids = [org.ownerId];
    for (let i = 0; i < 3; i += 1) ids.push((await idp.send('POST', '/scim/v2/Users', okta.create(person()))).body.id);
    const page = await idp.get('/scim/v2/Users?startIndex=2&count=2');
    expect(page.body).toMatchObject({ totalResults: 4, startIndex: 2, itemsPerPage: 2 });
    expect(page.body.Resources.map((u: { id: string }) => u.id)).toEqual(ids.slice(1, 3));
    expect((await idp.get('/scim/v2/Users?startIndex=0&count=1')).body).toMatchObject({ startIndex: 1, itemsPerPage: 1 });
    expect((await idp.get('/scim/v2/Users?count=-5')).body).toMatchObject({ totalResults: 4, itemsPerPage: 0, Resources: [] });
    const slim = await idp.get(`/scim/v2/Users/${ids[1]}?attributes=userName,name.givenName`);
    expect(Object.keys(slim.body).sort()).toEqual(['id', 'name', 'schemas', 'userName']);
    expect(Object.keys(slim.body.name)).toEqual(['givenName']);
    const noGroups = await idp.get(`/scim/v2/Users?excludedAttributes=groups,meta`);
    expect(noGroups.body.Resources[0].groups).toBeUndefined();
  });

  it('PATCH is all or nothing: a bad operation after a good one changes nothing', async () => {
    const { idp } = await provisioned();
    const created = (await idp.send('POST', '/scim/v2/Users', okta.create(person()))).body;
    const res = await idp.send('PATCH', `/scim/v2/Users/${created.id}`, {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [
        { op: 'replace', path: 'displayName', value: 'Changed' },
        { op: 'replace', path: 'active', value: 'maybe' },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ schemas: [ERROR], scimType: 'invalidValue' });
    expect((await idp.get(`/scim/v2/Users/${created.id}`)).body.displayName).toBe(created.displayName);
    const noPath = await idp.send('PATCH', `/scim/v2/Users/${created.id}`, {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [{ op: 'remove' }],
    });
    expect(noPath.body).toMatchObject({ status: '400', scimType: 'noTarget' });
  });

  it('answers 401 and 403 in SCIM form; discovery documents', async () => {
    const none = await t.call('GET', '/scim/v2/Users');
    expect(none.status).toBe(401);
    expect(none.body).toMatchObject({ schemas: [ERROR], status: '401' });
    const { org, idp, token } = await provisioned();
    for (const path of ['/scim/v2/ServiceProviderConfig', '/scim/v2/ResourceTypes', '/scim/v2/Schemas']) expect((await idp.get(path)).status).toBe(200);
    expect((await idp.get('/scim/v2/ServiceProviderConfig')).body).toMatchObject({
      patch: { supported: true },
      etag: { supported: true },
      sort: { supported: false },
    });
    await t.db.updateTable('organizations').set({ plan: 'free' }).where('id', '=', org.orgId).execute();
    const refused = await t.call('GET', '/scim/v2/Users', undefined, { headers: { authorization: `Bearer ${token}` } });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ schemas: [ERROR], status: '403' });
  });

  it('refuses bodies in SCIM form and changes nothing: missing userName, no usable email, malformed JSON, another media type, a different id on PUT', async () => {
    const { org, idp, token } = await provisioned();
    const count = async () => (await t.db.selectFrom('memberships').select('user_id').where('org_id', '=', org.orgId).execute()).length;
    const before = await count();
    const missing = await idp.send('POST', '/scim/v2/Users', { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], active: true });
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ schemas: [ERROR], status: '400', scimType: 'invalidValue' });
    const noEmail = await idp.send('POST', '/scim/v2/Users', { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName: 'ada_lovelace' });
    expect(noEmail.body).toMatchObject({ status: '400', scimType: 'invalidValue' });
    const malformed = await t.call('POST', '/scim/v2/Users', undefined, {
      raw: '{"schemas": [',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json' },
    });
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ schemas: [ERROR], status: '400', scimType: 'invalidSyntax' });
    const text = await t.call('POST', '/scim/v2/Users', undefined, {
      raw: 'userName=x',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
    });
    expect(text.status).toBe(415);
    expect(text.body).toMatchObject({ schemas: [ERROR], status: '415' });
    expect(await count()).toBe(before);
    const created = (await idp.send('POST', '/scim/v2/Users', okta.create(person()))).body;
    const otherId = await idp.send('PUT', `/scim/v2/Users/${created.id}`, { ...okta.create(person()), id: org.ownerId });
    expect(otherId.body).toMatchObject({ status: '400', scimType: 'mutability' });
  });
});
