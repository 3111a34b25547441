import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes, X509Certificate } from 'node:crypto';
import { hashSecret } from '../../src/lib/crypto';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { mintMcpServer } from '../support/mcp';
import { grantByConsent } from '../support/oauth-clients';
import { startOidcIdp, type OidcIdp } from '../support/oidc-idp';
import { idpMetadata, makeKeyPair, type KeyPair } from '../support/saml-keys';

/*
 * The five SSO connection operations over HTTP against the real app: SAML settings from
 * metadata served on loopback, pasted, or by hand; OIDC settings discovered from a real
 * OpenID Connect provider (oidc-provider) on loopback. Every response is checked against the
 * spec by the test client.
 */

const SSO = /^sso_[0-7][0-9a-hjkmnp-tv-z]{25}$/;
let t: TestApp;
let idp: OidcIdp;
let current: KeyPair;
let next: KeyPair;
let metadataServer: http.Server;
let metadataUrl: string;
const served = new Map<string, { status: number; body: string }>();

beforeAll(async () => {
  idp = await startOidcIdp();
  current = makeKeyPair('idp-current');
  next = makeKeyPair('idp-next');
  metadataServer = http.createServer((req, res) => {
    const answer = served.get(req.url ?? '') ?? { status: 404, body: 'not here' };
    res.writeHead(answer.status, { 'content-type': 'application/samlmetadata+xml' });
    res.end(answer.body);
  });
  await new Promise<void>((resolve) => metadataServer.listen(0, '127.0.0.1', () => resolve()));
  metadataUrl = `http://127.0.0.1:${(metadataServer.address() as AddressInfo).port}`;
  t = await startTestApp();
  await idp.configure(`${t.url}/auth/oidc/unused/callback`);
});
afterAll(async () => {
  await t.close();
  await idp.close();
  await new Promise((resolve) => metadataServer.close(resolve));
});

const unique = () => randomBytes(4).toString('hex');

async function newOrg(plan = 'enterprise') {
  const seeded = await t.factories.org();
  await t.db.updateTable('organizations').set({ plan }).where('id', '=', seeded.orgId).execute();
  return { ...seeded, client: t.as({ token: seeded.token, org: seeded.orgId }) };
}

/** A domain the organization has verified (DNS verification is org-domains.test.ts's business). */
async function verifiedDomain(orgId: string, status: 'verified' | 'pending' = 'verified'): Promise<string> {
  const domain = `d${unique()}.acme.example`;
  await t.db
    .insertInto('org_domains')
    .values({ id: newId('orgDomain'), org_id: orgId, domain, status, verification_value: 'x', verified_at: status === 'verified' ? new Date() : null })
    .execute();
  return domain;
}

const xml = (entityId = `http://idp.example/${unique()}`) => idpMetadata(entityId, 'https://idp.example/sso/redirect', [current.certBody, next.certBody]);
const row = (id: string) => t.db.selectFrom('sso_connections').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
const audit = async (orgId: string) => (await t.factories.auditEntries(orgId)).filter((e) => e.action.startsWith('sso_connection.'));

describe('createSsoConnection', () => {
  it('creates a SAML draft with the URLs to give the identity provider', async () => {
    const { client, orgId, ownerId } = await newOrg();
    const domain = await verifiedDomain(orgId);
    const res = await client.op('createSsoConnection', { body: { name: 'Okta', type: 'saml', domains: [domain] } });
    expect(res.status).toBe(201);
    const id = res.body.id;
    expect(id).toMatch(SSO);
    expect(res.headers.get('location')).toBe(`/sso-connection/${id}`);
    expect(res.body).toMatchObject({
      name: 'Okta',
      type: 'saml',
      status: 'draft',
      domains: [domain],
      enforce: false,
      jit_provisioning: { enabled: false, default_role_id: null },
      oidc: null,
      last_sign_in_at: null,
      created_by_user_id: ownerId,
      saml: {
        idp_entity_id: null,
        idp_sso_url: null,
        idp_certificate: null,
        idp_certificate_fingerprint_sha256: null,
        idp_certificate_not_after: null,
        idp_metadata_url: null,
        sp_entity_id: `${t.url}/auth/saml/${id}/metadata`,
        acs_url: `${t.url}/auth/saml/${id}/acs`,
        sp_metadata_url: `${t.url}/auth/saml/${id}/metadata`,
        login_url: `${t.url}/auth/saml/${id}/login`,
      },
    });
    const [entry] = await audit(orgId);
    expect(entry).toMatchObject({ action: 'sso_connection.created', target_id: id });
  });

  it('imports pasted metadata with both certificates of a rollover: active at once', async () => {
    const { client, orgId } = await newOrg();
    const entityId = `http://www.okta.com/${unique()}`;
    const res = await client.op('createSsoConnection', {
      body: { name: 'Okta', type: 'saml', domains: [await verifiedDomain(orgId)], saml: { metadata_xml: xml(entityId) } },
    });
    expect(res.status).toBe(201);
    const x509 = new X509Certificate(current.cert);
    expect(res.body.status).toBe('active');
    expect(res.body.saml).toMatchObject({
      idp_entity_id: entityId,
      idp_sso_url: 'https://idp.example/sso/redirect',
      idp_certificate_fingerprint_sha256: x509.fingerprint256,
      idp_certificate_not_after: new Date(x509.validTo).toISOString(),
      idp_metadata_url: null,
    });
    expect((await row(res.body.id)).saml_idp_certificates).toHaveLength(2);
  });

  it('fetches metadata from its URL through the outbound guard, and records the URL for the daily refresh', async () => {
    const { client } = await newOrg();
    const path = `/metadata/${unique()}`;
    served.set(path, { status: 200, body: xml('http://idp.example/by-url') });
    const res = await client.op('createSsoConnection', { body: { name: 'Entra', type: 'saml', saml: { metadata_url: `${metadataUrl}${path}` } } });
    expect(res.status).toBe(201);
    expect(res.body.saml).toMatchObject({ idp_entity_id: 'http://idp.example/by-url', idp_metadata_url: `${metadataUrl}${path}` });
    expect((await row(res.body.id)).saml_metadata_refreshed_at).not.toBeNull();
  });

  it('fetches metadata by URL again once a day, when a sign-in starts, following a certificate rollover', async () => {
    const { client } = await newOrg();
    const path = `/metadata/${unique()}`;
    served.set(path, { status: 200, body: idpMetadata('http://idp.example/rolling', 'https://idp.example/sso', [current.certBody]) });
    const conn = (await client.op('createSsoConnection', { body: { name: 'Rolling', type: 'saml', saml: { metadata_url: `${metadataUrl}${path}` } } })).body;
    served.set(path, { status: 200, body: idpMetadata('http://idp.example/rolling', 'https://idp.example/sso', [next.certBody, current.certBody]) });
    // Within the day: not fetched again.
    expect((await t.call('GET', `/auth/saml/${conn.id}/login`)).status).toBe(302);
    expect((await row(conn.id)).saml_idp_certificates).toHaveLength(1);
    await t.db
      .updateTable('sso_connections')
      .set({ saml_metadata_refreshed_at: new Date(Date.now() - 25 * 3600_000) })
      .where('id', '=', conn.id)
      .execute();
    expect((await t.call('GET', `/auth/saml/${conn.id}/login`)).status).toBe(302);
    expect((await row(conn.id)).saml_idp_certificates).toHaveLength(2);
    const got = await client.op('getSsoConnection', { params: { id: conn.id } });
    expect(got.body.saml!.idp_certificate_fingerprint_sha256).toBe(new X509Certificate(next.cert).fingerprint256);
    // A failed refresh keeps the settings.
    served.set(path, { status: 500, body: 'down' });
    await t.db
      .updateTable('sso_connections')
      .set({ saml_metadata_refreshed_at: new Date(Date.now() - 25 * 3600_000) })
      .where('id', '=', conn.id)
      .execute();
    expect((await t.call('GET', `/auth/saml/${conn.id}/login`)).status).toBe(302);
    expect((await row(conn.id)).saml_idp_certificates).toHaveLength(2);
  });

  it('refuses metadata that cannot be used, and writes nothing', async () => {
    const { client, orgId } = await newOrg();
    const cases: Record<string, unknown>[] = [
      { metadata_xml: `<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>${xml()}` },
      { metadata_xml: '<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="x"/>' },
      { metadata_xml: '<not-closed' },
      { metadata_xml: idpMetadata('http://idp.example/x', 'https://idp.example/sso', ['AAAA']) },
      { metadata_url: `${metadataUrl}/missing` },
      {
        idp_entity_id: 'http://idp.example/x',
        idp_sso_url: 'https://idp.example/sso',
        idp_certificate: `-----BEGIN CERTIFICATE-----\n${'A'.repeat(120)}\n-----END CERTIFICATE-----`,
      },
    ];
    for (const saml of cases) {
      const res = await client.post('/sso-connection', { name: `S ${unique()}`, type: 'saml', saml });
      expectError(res, 400, 'idp_metadata_invalid');
    }
    expectError(
      await client.post('/sso-connection', { name: 'Mixed', type: 'saml', saml: { metadata_xml: xml(), idp_entity_id: 'x' } }),
      400,
      'validation_failed',
    );
    expectError(
      await client.post('/sso-connection', { name: 'Private', type: 'saml', saml: { metadata_url: 'https://10.1.2.3/metadata' } }),
      400,
      'outbound_url_not_allowed',
    );
    expectError(
      await client.post('/sso-connection', { name: 'Plain', type: 'saml', saml: { metadata_url: 'http://idp.example/metadata' } }),
      400,
      'outbound_url_not_allowed',
    );
    expect(await t.db.selectFrom('sso_connections').select('id').where('org_id', '=', orgId).execute()).toEqual([]);
  });

  it('takes SAML settings by hand', async () => {
    const { client } = await newOrg();
    const res = await client.op('createSsoConnection', {
      body: {
        name: 'ADFS',
        type: 'saml',
        saml: { idp_entity_id: 'http://adfs.example/adfs/services/trust', idp_sso_url: 'https://adfs.example/adfs/ls/', idp_certificate: current.cert },
      },
    });
    expect(res.status).toBe(201);
    expect(res.body.status).toBe('active');
    expect(res.body.saml!.idp_certificate!.replace(/\s/g, '')).toBe(current.cert.replace(/\s/g, ''));
  });

  it('creates an OIDC connection from discovery, with the client secret sealed and never returned', async () => {
    const { client, orgId } = await newOrg();
    const secret = `secret-${unique()}-value`;
    const res = await client.op('createSsoConnection', {
      body: {
        name: 'Acme IdP',
        type: 'oidc',
        domains: [await verifiedDomain(orgId)],
        oidc: { issuer: idp.issuer, client_id: idp.clientId, client_secret: secret },
      },
    });
    expect(res.status).toBe(201);
    expect(res.text).not.toContain(secret);
    const id = res.body.id;
    expect(res.body).toMatchObject({
      status: 'active',
      saml: null,
      oidc: {
        issuer: idp.issuer,
        client_id: idp.clientId,
        has_client_secret: true,
        scopes: ['openid', 'email', 'profile'],
        authorization_endpoint: `${idp.issuer}/auth`,
        token_endpoint: `${idp.issuer}/token`,
        jwks_uri: `${idp.issuer}/jwks`,
        redirect_uri: `${t.url}/auth/oidc/${id}/callback`,
        login_url: `${t.url}/auth/oidc/${id}/login`,
      },
    });
    const stored = await row(id);
    expect(stored.oidc_client_secret_enc).not.toContain(secret);
    expect(stored.oidc_token_auth_method).toBe('client_secret_basic');
    expect(JSON.stringify(await audit(orgId))).not.toContain(secret);
  });

  it('keeps an OIDC connection without a secret a draft, and create with status inactive stays off', async () => {
    const { client } = await newOrg();
    const draft = await client.op('createSsoConnection', { body: { name: 'Draft', type: 'oidc', oidc: { issuer: idp.issuer, client_id: 'x' } } });
    expect(draft.body.status).toBe('draft');
    expect(draft.body.oidc!.has_client_secret).toBe(false);
    const off = await client.op('createSsoConnection', {
      body: { name: 'Off', type: 'oidc', status: 'inactive', oidc: { issuer: idp.issuer, client_id: 'x', client_secret: 'y' } },
    });
    expect(off.body.status).toBe('inactive');
  });

  it('refuses a multi-tenant Entra issuer with a clear message, an unreachable issuer, and a private one', async () => {
    const { client } = await newOrg();
    for (const tenant of ['common', 'organizations', 'consumers']) {
      const res = await client.post('/sso-connection', { name: 'Entra', type: 'oidc', oidc: { issuer: `https://login.microsoftonline.com/${tenant}/v2.0` } });
      expectError(res, 400, 'idp_metadata_invalid');
      expect(res.body.detail).toMatch(/multi-tenant.*tenant id/);
    }
    expectError(await client.post('/sso-connection', { name: 'Down', type: 'oidc', oidc: { issuer: 'http://127.0.0.1:9' } }), 400, 'idp_metadata_invalid');
    expectError(
      await client.post('/sso-connection', { name: 'Inside', type: 'oidc', oidc: { issuer: 'https://192.168.1.10' } }),
      400,
      'outbound_url_not_allowed',
    );
  });

  it('serves only verified domains, each by one connection; names are unique', async () => {
    const { client, orgId } = await newOrg();
    const pending = await verifiedDomain(orgId, 'pending');
    expectError(await client.post('/sso-connection', { name: 'A', type: 'saml', domains: [pending] }), 409, 'domain_not_verified');
    const other = await newOrg();
    const theirs = await verifiedDomain(other.orgId);
    expectError(await client.post('/sso-connection', { name: 'A', type: 'saml', domains: [theirs] }), 409, 'domain_not_verified');
    const domain = await verifiedDomain(orgId);
    expect((await client.post('/sso-connection', { name: 'A', type: 'saml', domains: [domain] })).status).toBe(201);
    expectError(await client.post('/sso-connection', { name: 'B', type: 'saml', domains: [domain] }), 409, 'conflict');
    expectError(await client.post('/sso-connection', { name: 'A', type: 'oidc' }), 409, 'name_taken');
  });

  it('refuses enforcement before anyone signed in through it (a lock-out)', async () => {
    const { client } = await newOrg();
    const res = await client.post('/sso-connection', { name: 'E', type: 'saml', enforce: true });
    expectError(res, 409, 'conflict');
    expect(res.body.detail).toMatch(/lock/);
  });

  it('bounds the just-in-time role like any grant', async () => {
    const { client, orgId, ownerId, roleIds } = await newOrg();
    expectError(
      await client.post('/sso-connection', { name: 'J', type: 'saml', jit_provisioning: { enabled: true, default_role_id: roleIds.owner } }),
      400,
      'validation_failed',
    );
    expectError(
      await client.post('/sso-connection', { name: 'J', type: 'saml', jit_provisioning: { default_role_id: newId('role') } }),
      400,
      'unknown_reference',
    );
    const strong = await t.factories.customRole(orgId, ['sso:manage', 'sso:view', 'member:manage']);
    const limited = t.as({ token: await t.factories.token(orgId, ownerId, ['sso:manage', 'sso:view']), org: orgId });
    expectError(
      await limited.post('/sso-connection', { name: 'J', type: 'saml', jit_provisioning: { default_role_id: strong } }),
      403,
      'permission_escalation',
    );
    const ok = await client.op('createSsoConnection', { body: { name: 'J', type: 'saml', jit_provisioning: { enabled: true, default_role_id: strong } } });
    expect(ok.body.jit_provisioning).toEqual({ enabled: true, default_role_id: strong });
    // The role is in use now: deleting it is refused.
    expectError(await client.delete(`/role/${strong}`), 409, 'role_in_use');
  });

  it('needs the plan feature, the permission and a credential', async () => {
    const free = await newOrg('free');
    expectError(await free.client.post('/sso-connection', { name: 'F', type: 'saml' }), 403, 'entitlement_exceeded');
    const { orgId, ownerId } = await newOrg();
    const viewer = t.as({ token: await t.factories.token(orgId, ownerId, ['sso:view']), org: orgId });
    expectError(await viewer.post('/sso-connection', { name: 'F', type: 'saml' }), 403, 'missing_permission');
    expectError(await t.as({ org: orgId }).post('/sso-connection', { name: 'F', type: 'saml' }), 401, 'unauthenticated');
  });

  it('validates the body against the contract', async () => {
    const { client } = await newOrg();
    expectError(await client.post('/sso-connection', { type: 'saml' }), 400, 'validation_failed');
    expectError(await client.post('/sso-connection', { name: 'X', type: 'ldap' }), 400, 'validation_failed');
    expectError(await client.post('/sso-connection', { name: 'X', type: 'saml', surprise: true }), 400, 'validation_failed');
    expectError(await client.post('/sso-connection', { name: 'X', type: 'saml', oidc: { client_id: 'x' } }), 400, 'validation_failed');
    expectError(await client.post('/sso-connection', { name: 'X', type: 'oidc', oidc: { scopes: ['email'] } }), 400, 'validation_failed');
  });
});

describe('listSsoConnections and getSsoConnection', () => {
  it('walks every page once, filters, and hides other organizations', async () => {
    const { client, orgId } = await newOrg();
    const domain = await verifiedDomain(orgId);
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) {
      const res = await client.op('createSsoConnection', { body: { name: `C${i}`, type: i % 2 ? 'oidc' : 'saml', ...(i === 0 ? { domains: [domain] } : {}) } });
      ids.push(res.body.id);
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.op('listSsoConnections', { query: { limit: 2, ...(cursor ? { cursor } : {}) } });
      expect(page.status).toBe(200);
      seen.push(...page.body.data.map((c) => c.id));
      cursor = page.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(ids);
    expect((await client.op('listSsoConnections', { query: { type: 'oidc' } })).body.data.map((c) => c.id)).toEqual([ids[1], ids[3]]);
    expect((await client.op('listSsoConnections', { query: { domain } })).body.data.map((c) => c.id)).toEqual([ids[0]]);
    expect((await client.op('listSsoConnections', { query: { status: 'active' } })).body.data).toEqual([]);
    const got = await client.op('getSsoConnection', { params: { id: ids[0]! } });
    expect(got.body.domains).toEqual([domain]);
    const other = await newOrg();
    expectError(await other.client.op('getSsoConnection', { params: { id: ids[0]! } }), 404, 'not_found');
    expect((await other.client.op('listSsoConnections', {})).body.data).toEqual([]);
    expectError(await client.get('/sso-connection/nope'), 400, 'validation_failed');
  });
});

describe('updateSsoConnection', () => {
  it('completes a SAML draft by hand, which turns it active; audits the names of what changed', async () => {
    const { client, orgId } = await newOrg();
    const draft = (await client.op('createSsoConnection', { body: { name: 'Okta', type: 'saml' } })).body;
    const res = await client.op('updateSsoConnection', {
      params: { id: draft.id },
      body: { name: 'Okta prod', saml: { idp_entity_id: 'http://www.okta.com/x', idp_sso_url: 'https://acme.okta.com/sso', idp_certificate: current.cert } },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 'Okta prod', status: 'active', saml: { idp_entity_id: 'http://www.okta.com/x' } });
    const entries = await audit(orgId);
    expect(entries.at(-1)).toMatchObject({ action: 'sso_connection.updated', target_id: draft.id, changes: { changed: ['name', 'saml', 'status'] } });
  });

  it('rotates the OIDC secret without showing it, and refuses what does not fit', async () => {
    const { client, orgId } = await newOrg();
    const conn = (await client.op('createSsoConnection', { body: { name: 'O', type: 'oidc', oidc: { issuer: idp.issuer, client_id: idp.clientId } } })).body;
    expectError(await client.op('updateSsoConnection', { params: { id: conn.id }, body: { status: 'active' } }), 409, 'sso_connection_incomplete');
    const before = await row(conn.id);
    const res = await client.op('updateSsoConnection', { params: { id: conn.id }, body: { oidc: { client_secret: 'rotated-secret-value' } } });
    expect(res.body.status).toBe('active');
    expect(res.text).not.toContain('rotated-secret-value');
    expect((await row(conn.id)).oidc_client_secret_enc).not.toBe(before.oidc_client_secret_enc);
    expect(JSON.stringify(await audit(orgId))).not.toContain('rotated-secret-value');
    expectError(await client.op('updateSsoConnection', { params: { id: conn.id }, body: { type: 'saml' } }), 400, 'immutable_field');
    expectError(await client.op('updateSsoConnection', { params: { id: conn.id }, body: { saml: { metadata_xml: xml() } } }), 400, 'validation_failed');
    const off = await client.op('updateSsoConnection', { params: { id: conn.id }, body: { status: 'inactive' } });
    expect(off.body.status).toBe('inactive');
    expectError(await client.post('/sso-connection', {}), 400, 'validation_failed');
    const other = await newOrg();
    expectError(await other.client.op('updateSsoConnection', { params: { id: conn.id }, body: { name: 'Mine' } }), 404, 'not_found');
    expect((await row(conn.id)).name).toBe('O');
  });

  it('turns enforcement on only after a sign-in, and then ends the sessions that did not come through it', async () => {
    const { client, orgId } = await newOrg();
    const domain = await verifiedDomain(orgId);
    const conn = (await client.op('createSsoConnection', { body: { name: 'E', type: 'saml', domains: [domain], saml: { metadata_xml: xml() } } })).body;
    expectError(await client.op('updateSsoConnection', { params: { id: conn.id }, body: { enforce: true } }), 409, 'conflict');
    expect((await row(conn.id)).enforce).toBe(false);
    const inDomain = await t.factories.user({ email: `ada-${unique()}@${domain}` });
    const elsewhere = await t.factories.user({ email: `bob-${unique()}@other.example` });
    await t.factories.session(inDomain);
    await t.factories.session(elsewhere);
    const viaSso = await t.factories.session(inDomain);
    await t.db.updateTable('sessions').set({ sso_connection_id: conn.id, method: 'sso' }).where('token_hash', '=', hashSecret(viaSso)).execute();
    await t.db.updateTable('sso_connections').set({ last_sign_in_at: new Date() }).where('id', '=', conn.id).execute();
    const res = await client.op('updateSsoConnection', { params: { id: conn.id }, body: { enforce: true } });
    expect(res.body.enforce).toBe(true);
    const sessions = await t.db
      .selectFrom('sessions')
      .select(['user_id', 'revoked_at', 'sso_connection_id'])
      .where('user_id', 'in', [inDomain, elsewhere])
      .execute();
    expect(sessions.filter((s) => s.revoked_at !== null)).toEqual([{ user_id: inDomain, revoked_at: expect.any(Date), sso_connection_id: null }]);
    expect((await audit(orgId)).at(-1)).toMatchObject({ changes: { changed: ['enforce'], sessions_ended: 1 } });
  });

  it('ends, with the sessions, the MCP clients’ grants consented outside the connection once it is enforced', async () => {
    const { client, orgId, ownerId, token } = await newOrg();
    const domain = await verifiedDomain(orgId);
    await t.db
      .updateTable('users')
      .set({ email: `ada-${unique()}@${domain}` })
      .where('id', '=', ownerId)
      .execute();
    const conn = (await client.op('createSsoConnection', { body: { name: 'E', type: 'saml', domains: [domain], saml: { metadata_xml: xml() } } })).body;
    const server = await mintMcpServer(t, { orgId, token });
    const resource = `${t.url}/mcp/${server.id}`;
    const plain = await t.factories.session(ownerId);
    const viaSso = await t.factories.session(ownerId);
    await t.db.updateTable('sessions').set({ sso_connection_id: conn.id, method: 'sso' }).where('token_hash', '=', hashSecret(viaSso)).execute();
    const outside = await grantByConsent(t, plain, resource);
    const inside = await grantByConsent(t, viaSso, resource);
    const ping = (accessToken: string) =>
      fetch(resource, {
        method: 'POST',
        headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
    expect((await ping(outside.access_token)).status).toBe(200);

    await t.db.updateTable('sso_connections').set({ last_sign_in_at: new Date() }).where('id', '=', conn.id).execute();
    expect((await client.op('updateSsoConnection', { params: { id: conn.id }, body: { enforce: true } })).body.enforce).toBe(true);
    expect((await ping(outside.access_token)).status).toBe(401);
    const refresh = (grant: typeof outside) =>
      t.call('POST', '/oauth/token', undefined, {
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        raw: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: grant.refresh_token, client_id: grant.clientId }).toString(),
      });
    const refused = await refresh(outside);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ error: 'invalid_grant' });
    expect((await ping(inside.access_token)).status).toBe(200);
    expect((await refresh(inside)).status).toBe(200);
    expect((await audit(orgId)).at(-1)).toMatchObject({ changes: { changed: ['enforce'], sessions_ended: 1, oauth_grants_ended: 1 } });
  });

  it('moves domains, refusing one another connection serves', async () => {
    const { client, orgId } = await newOrg();
    const [a, b] = [await verifiedDomain(orgId), await verifiedDomain(orgId)];
    const one = (await client.op('createSsoConnection', { body: { name: '1', type: 'saml', domains: [a] } })).body;
    const two = (await client.op('createSsoConnection', { body: { name: '2', type: 'saml', domains: [b] } })).body;
    expectError(await client.op('updateSsoConnection', { params: { id: two.id }, body: { domains: [a, b] } }), 409, 'conflict');
    expect((await client.op('updateSsoConnection', { params: { id: one.id }, body: { domains: [] } })).body.domains).toEqual([]);
    expect((await client.op('updateSsoConnection', { params: { id: two.id }, body: { domains: [b, a] } })).body.domains).toEqual([a, b].sort());
  });
});

describe('permissions', () => {
  it('needs sso:view to read and sso:manage to change, and a credential for all', async () => {
    const { client, orgId, ownerId } = await newOrg();
    const conn = (await client.op('createSsoConnection', { body: { name: 'P', type: 'saml' } })).body;
    const none = t.as({ token: await t.factories.token(orgId, ownerId, ['organization:view']), org: orgId });
    const viewer = t.as({ token: await t.factories.token(orgId, ownerId, ['sso:view']), org: orgId });
    expectError(await none.op('listSsoConnections', {}), 403, 'missing_permission');
    expectError(await none.op('getSsoConnection', { params: { id: conn.id } }), 403, 'missing_permission');
    expect((await viewer.op('getSsoConnection', { params: { id: conn.id } })).status).toBe(200);
    expectError(await viewer.op('updateSsoConnection', { params: { id: conn.id }, body: { name: 'Q' } }), 403, 'missing_permission');
    expectError(await viewer.op('deleteSsoConnection', { params: { id: conn.id } }), 403, 'missing_permission');
    expectError(await t.as({ org: orgId }).get(`/sso-connection/${conn.id}`), 401, 'unauthenticated');
    expect((await row(conn.id)).name).toBe('P');
  });
});

describe('deleteSsoConnection', () => {
  it('deletes, then 404; a domain it served can be deleted only after', async () => {
    const { client, orgId } = await newOrg();
    const domain = await verifiedDomain(orgId);
    const domainId = (await t.db.selectFrom('org_domains').select('id').where('domain', '=', domain).executeTakeFirstOrThrow()).id;
    const conn = (await client.op('createSsoConnection', { body: { name: 'D', type: 'saml', domains: [domain] } })).body;
    const refused = await client.op('deleteOrgDomain', { params: { id: domainId } });
    expectError(refused, 409, 'domain_in_use');
    expect((refused.body as { detail: string }).detail).toContain(conn.id);
    const other = await newOrg();
    expectError(await other.client.op('deleteSsoConnection', { params: { id: conn.id } }), 404, 'not_found');
    expect((await client.op('deleteSsoConnection', { params: { id: conn.id } })).status).toBe(204);
    expectError(await client.op('deleteSsoConnection', { params: { id: conn.id } }), 404, 'not_found');
    expect((await audit(orgId)).at(-1)).toMatchObject({ action: 'sso_connection.deleted', target_id: conn.id });
    expect((await client.op('deleteOrgDomain', { params: { id: domainId } })).status).toBe(204);
  });
});
