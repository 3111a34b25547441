import { randomBytes } from 'node:crypto';
import { inflateRawSync } from 'node:zlib';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp, type TestResponse } from '../support/app';
import { expectError } from '../support/client';
import { startSamlIdp, type ResponseOptions, type SamlIdp, type SamlUser } from '../support/saml-idp';
import { makeKeyPair, type KeyPair } from '../support/saml-keys';

/**
 * Enterprise sign-in through a SAML connection, with samlify as the identity provider: the SP
 * metadata, the signed AuthnRequest, the assertion consumer, and the responses it must refuse
 * (each a known attack on SAML service providers: signature wrapping, an unsigned assertion
 * beside a signed one, a comment splitting the NameID, replays, answers to another request,
 * another recipient, destination or audience, expired conditions, an untrusted signer).
 */
let t: TestApp;
let idp: SamlIdp;
let sp: KeyPair;
let spNext: KeyPair;
let orgId: string;
let domain: string;
let connectionId: string;
let spMetadata: string;
let client: ReturnType<TestApp['as']>;

const unique = () => randomBytes(4).toString('hex');
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

beforeAll(async () => {
  idp = startSamlIdp();
  sp = makeKeyPair('control-plane-sp');
  spNext = makeKeyPair('control-plane-sp-next');
  t = await startTestApp({ env: { SAML_SP_PRIVATE_KEY: sp.key, SAML_SP_CERTIFICATE: sp.cert, SAML_SP_NEXT_CERTIFICATE: spNext.cert } });
  const org = await t.factories.org();
  orgId = org.orgId;
  await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', orgId).execute();
  client = t.as({ token: org.token, org: orgId });
  domain = `d${unique()}.acme.example`;
  await t.db
    .insertInto('org_domains')
    .values({ id: newId('orgDomain'), org_id: orgId, domain, status: 'verified', verification_value: 'x', verified_at: new Date() })
    .execute();
  const created = await client.op('createSsoConnection', {
    body: { name: 'Okta', type: 'saml', domains: [domain], jit_provisioning: { enabled: true }, saml: { metadata_xml: idp.metadata } },
  });
  expect(created.body.status).toBe('active');
  connectionId = created.body.id;
  spMetadata = (await t.call('GET', `/auth/saml/${connectionId}/metadata`)).text;
});
afterAll(async () => {
  await t.close();
});

const cookieIn = (res: { headers: Headers }, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0]
    ?.slice(name.length + 1);

interface Started {
  res: TestResponse;
  location: URL;
  requestId: string;
  requestXml: string;
  relayState: string;
  flow: string;
}

async function start(query = ''): Promise<Started> {
  const res = await t.call('GET', `/auth/saml/${connectionId}/login${query}`);
  expect(res.status).toBe(302);
  const location = new URL(res.headers.get('location') as string);
  const requestXml = inflateRawSync(Buffer.from(location.searchParams.get('SAMLRequest') as string, 'base64')).toString('utf8');
  const requestId = /ID="([^"]+)"/.exec(requestXml)?.[1] as string;
  return { res, location, requestId, requestXml, relayState: location.searchParams.get('RelayState') as string, flow: cookieIn(res, 'cp_auth_flow') as string };
}

const post = (fields: Record<string, string>, flow: string | null) =>
  t.call('POST', `/auth/saml/${connectionId}/acs`, undefined, {
    raw: new URLSearchParams(fields).toString(),
    headers: { ...FORM, ...(flow ? { cookie: `cp_auth_flow=${flow}` } : {}) },
  });

async function signInThrough(user: SamlUser, options: ResponseOptions = {}, query = '') {
  const started = await start(query);
  const response = await idp.respond(spMetadata, started.requestId, user, options);
  return post({ SAMLResponse: response, RelayState: started.relayState }, started.flow);
}

const failedWith = (res: TestResponse, reason: string) => {
  expect(res.status).toBe(302);
  expect(res.headers.get('location')).toBe(`${t.url}/sign-in?error=${reason}`);
  expect(cookieIn(res, '__Host-cp_session')).toBeUndefined();
};
const me = async (res: TestResponse) => (await t.call('GET', '/user/me', undefined, { session: cookieIn(res, '__Host-cp_session') })).body;
const person = () => `p-${unique()}@${domain}`;

describe('getSamlMetadata', () => {
  it('describes the SP: entity id, ACS, signed requests with the current and next certificate', async () => {
    const res = await t.call('GET', `/auth/saml/${connectionId}/metadata`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/xml/);
    expect(res.text).toContain(`entityID="${t.url}/auth/saml/${connectionId}/metadata"`);
    expect(res.text).toContain(`Location="${t.url}/auth/saml/${connectionId}/acs"`);
    expect(res.text).toMatch(/AuthnRequestsSigned="true"/);
    expect(res.text).toMatch(/WantAssertionsSigned="true"/);
    const flat = res.text.replace(/\s/g, '');
    expect(flat).toContain(sp.certBody);
    expect(flat).toContain(spNext.certBody);
  });

  it('serves a draft too, and answers 404 for an OIDC or unknown connection', async () => {
    const draft = (await client.op('createSsoConnection', { body: { name: `Draft ${unique()}`, type: 'saml' } })).body;
    expect((await t.call('GET', `/auth/saml/${draft.id}/metadata`)).status).toBe(200);
    const oidc = (await client.op('createSsoConnection', { body: { name: `Oidc ${unique()}`, type: 'oidc' } })).body;
    expectError(await t.call('GET', `/auth/saml/${oidc.id}/metadata`), 404, 'not_found');
    expectError(await t.call('GET', `/auth/saml/${newId('ssoConnection')}/metadata`), 404, 'not_found');
  });
});

describe('startSamlLogin', () => {
  it('redirects with a signed AuthnRequest (SHA-256), no RequestedAuthnContext, a RelayState, and a cross-site flow cookie', async () => {
    const { location, requestXml, relayState, res, requestId } = await start(`?login_hint=${encodeURIComponent(`ada@${domain}`)}`);
    expect(`${location.origin}${location.pathname}`).toBe(idp.ssoUrl);
    expect(location.searchParams.get('SigAlg')).toBe('http://www.w3.org/2001/04/xmldsig-more#rsa-sha256');
    expect(location.searchParams.get('Signature')).toBeTruthy();
    expect(location.searchParams.get('login_hint')).toBe(`ada@${domain}`);
    expect(relayState).toMatch(/^lr_/);
    expect(requestXml).not.toContain('RequestedAuthnContext');
    expect(requestXml).toContain(`AssertionConsumerServiceURL="${t.url}/auth/saml/${connectionId}/acs"`);
    expect(res.headers.getSetCookie().find((c) => c.startsWith('cp_auth_flow='))).toMatch(/; Path=\/auth; HttpOnly; Secure; SameSite=None; Max-Age=600$/);
    const stored = await t.db.selectFrom('saml_requests').selectAll().where('id', '=', requestId).executeTakeFirstOrThrow();
    expect(stored).toMatchObject({ connection_id: connectionId, relay_state: relayState });
  });

  it('answers 404 for an OIDC, draft or unknown connection', async () => {
    const draft = (await client.op('createSsoConnection', { body: { name: `Draft ${unique()}`, type: 'saml' } })).body;
    expectError(await t.call('GET', `/auth/saml/${draft.id}/login`), 404, 'not_found');
    expectError(await t.call('GET', `/auth/saml/${newId('ssoConnection')}/login`), 404, 'not_found');
  });
});

describe('consumeSamlAssertion', () => {
  it('signs a new person in, provisioned just in time, linked by (connection, issuer, NameID)', async () => {
    const email = person();
    const res = await signInThrough({ nameId: email }, {}, '?return_to=%2Forg%2Facme');
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`${t.url}/org/acme`);
    const user = await me(res);
    expect(user.email).toBe(email);
    const link = await t.db.selectFrom('sso_identities').selectAll().where('user_id', '=', user.id).executeTakeFirstOrThrow();
    expect(link).toMatchObject({ connection_id: connectionId, issuer: idp.entityId, subject: email });
    const member = await t.db.selectFrom('memberships').select('via').where('org_id', '=', orgId).where('user_id', '=', user.id).executeTakeFirstOrThrow();
    expect(member.via).toBe('sso_jit');
    const session = await t.db.selectFrom('sessions').select(['method', 'sso_connection_id']).where('user_id', '=', user.id).executeTakeFirstOrThrow();
    expect(session).toEqual({ method: 'sso', sso_connection_id: connectionId });
  });

  it("reads Entra's claim names: an opaque NameID, the email claim, and the object id SCIM provisioned", async () => {
    const userId = await t.factories.user({ email: person() });
    await t.factories.member(orgId, { userId, via: 'scim' });
    const oid = `oid-${unique()}`;
    await t.db.updateTable('memberships').set({ external_id: oid }).where('org_id', '=', orgId).where('user_id', '=', userId).execute();
    const res = await signInThrough({
      nameId: `opaque-${unique()}`,
      attributes: {
        'http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress': person(),
        'http://schemas.microsoft.com/identity/claims/objectidentifier': oid,
      },
    });
    expect((await me(res)).id).toBe(userId);
  });

  it('refuses a response signed by a key the connection does not trust', async () => {
    failedWith(await signInThrough({ nameId: person() }, { keys: makeKeyPair('attacker') }), 'provider_error');
  });

  it('refuses an unsigned assertion placed beside the signed one', async () => {
    const victim = person();
    const res = await signInThrough(
      { nameId: person() },
      {
        tamper: (xml) => {
          const signed = /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(xml)![0];
          const forged = signed
            .replace(/<ds:Signature[\s\S]*<\/ds:Signature>/, '')
            .replace(/ID="[^"]+"/, 'ID="_forged"')
            .replace(/<saml:NameID([^>]*)>[^<]*</, `<saml:NameID$1>${victim}<`);
          return xml.replace(signed, forged + signed);
        },
      },
    );
    failedWith(res, 'provider_error');
  });

  it('refuses a wrapped signature (the signed assertion moved aside, a forged one in its place)', async () => {
    const victim = person();
    const res = await signInThrough(
      { nameId: person() },
      {
        tamper: (xml) => {
          const signed = /<saml:Assertion[\s\S]*<\/saml:Assertion>/.exec(xml)![0];
          const forged = signed.replace(/<ds:Signature[\s\S]*<\/ds:Signature>/, '').replace(/<saml:NameID([^>]*)>[^<]*</, `<saml:NameID$1>${victim}<`);
          return xml.replace(signed, `<samlp:Extensions>${signed}</samlp:Extensions>${forged}`);
        },
      },
    );
    failedWith(res, 'provider_error');
    expect(await t.db.selectFrom('users').select('id').where('email', '=', victim).execute()).toEqual([]);
  });

  it('reads a NameID split by a comment whole, so it names nobody of the domain', async () => {
    const victim = person();
    const res = await signInThrough(
      { nameId: `${victim}.evil.example` },
      { tamper: (xml) => xml.replace(`${victim}.evil.example`, `${victim}<!---->.evil.example`) },
    );
    failedWith(res, 'email_unverified');
    expect(await t.db.selectFrom('users').select('id').where('email', '=', victim).execute()).toEqual([]);
  });

  it('refuses an assertion id seen before, even in an answer to a new request', async () => {
    const values = { AssertionID: `_fixed${unique()}` };
    const email = person();
    expect((await signInThrough({ nameId: email }, { values })).headers.get('location')).toBe(`${t.url}/`);
    failedWith(await signInThrough({ nameId: email }, { values }), 'provider_error');
  });

  it('refuses the same response posted again (its request is answered)', async () => {
    const started = await start();
    const response = await idp.respond(spMetadata, started.requestId, { nameId: person() });
    expect((await post({ SAMLResponse: response, RelayState: started.relayState }, started.flow)).status).toBe(302);
    failedWith(await post({ SAMLResponse: response, RelayState: started.relayState }, started.flow), 'invalid_state');
  });

  it("refuses an answer to another request, or to another browser's", async () => {
    const first = await start();
    const second = await start();
    const forFirst = await idp.respond(spMetadata, first.requestId, { nameId: person() });
    failedWith(await post({ SAMLResponse: forFirst, RelayState: second.relayState }, null), 'provider_error');
    // The attacker's own valid response for their own request, posted into the victim's browser (login CSRF).
    const attacker = await start();
    const victim = await start();
    const attackers = await idp.respond(spMetadata, attacker.requestId, { nameId: person() });
    failedWith(await post({ SAMLResponse: attackers, RelayState: attacker.relayState }, victim.flow), 'invalid_state');
  });

  it('refuses unsolicited (IdP-initiated) responses', async () => {
    const response = await idp.respond(spMetadata, '_unsolicited', { nameId: person() });
    failedWith(await post({ SAMLResponse: response }, null), 'invalid_state');
  });

  it.each([
    ['Recipient', { SubjectRecipient: 'https://elsewhere.example/acs' }],
    ['Destination', { Destination: 'https://elsewhere.example/acs' }],
    ['Audience', { Audience: 'https://elsewhere.example/sp' }],
    [
      'expired Conditions',
      { ConditionsNotOnOrAfter: new Date(Date.now() - 10 * 60_000).toISOString(), ConditionsNotBefore: new Date(Date.now() - 20 * 60_000).toISOString() },
    ],
    ['expired SubjectConfirmation', { SubjectConfirmationDataNotOnOrAfter: new Date(Date.now() - 10 * 60_000).toISOString() }],
    ['another Issuer', { Issuer: 'http://idp.test/someone-else' }],
    ['a failed Status', { StatusCode: 'urn:oasis:names:tc:SAML:2.0:status:Responder' }],
  ])('refuses a response with %s', async (_what, values) => {
    failedWith(await signInThrough({ nameId: person() }, { values }), 'provider_error');
  });

  it('answers 400 without a SAMLResponse and 404 for an unknown connection', async () => {
    expectError(await post({ RelayState: 'x' }, null), 400, 'validation_failed');
    const res = await t.call('POST', `/auth/saml/${newId('ssoConnection')}/acs`, undefined, { raw: 'SAMLResponse=eA%3D%3D', headers: FORM });
    expectError(res, 404, 'not_found');
  });
});
