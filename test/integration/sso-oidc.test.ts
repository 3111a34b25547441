import { randomBytes } from 'node:crypto';
import { issueEmailLink } from '../../src/identity/email-links';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp, type TestResponse } from '../support/app';
import { expectError } from '../support/client';
import { startOidcIdp, type OidcIdp } from '../support/oidc-idp';
import { SoftAuthenticator } from '../support/webauthn';

/**
 * Enterprise sign-in through an organization's OpenID Connect connection, against a real
 * OpenID Connect provider on loopback (oidc-provider): resolveSsoConnection, the redirect out
 * (PKCE, state, nonce, flow cookie), the callback, and how identities meet accounts (by
 * connection, issuer and subject; SCIM's externalId; an existing account never by email alone).
 */
let idp: OidcIdp;
let social: OidcIdp;
let t: TestApp;
let orgId: string;
let domain: string;
let connectionId: string;
let client: ReturnType<TestApp['as']>;

const unique = () => randomBytes(4).toString('hex');

async function verifiedDomain(org: string): Promise<string> {
  const name = `d${unique()}.acme.example`;
  await t.db
    .insertInto('org_domains')
    .values({ id: newId('orgDomain'), org_id: org, domain: name, status: 'verified', verification_value: 'x', verified_at: new Date() })
    .execute();
  return name;
}

beforeAll(async () => {
  idp = await startOidcIdp();
  social = await startOidcIdp();
  t = await startTestApp({
    env: {
      SOCIAL_PROVIDERS: 'acme-id',
      SOCIAL_ACME_ID_ISSUER: social.issuer,
      SOCIAL_ACME_ID_CLIENT_ID: social.clientId,
      SOCIAL_ACME_ID_CLIENT_SECRET: social.clientSecret,
    },
  });
  await social.configure(`${t.url}/auth/sso/acme-id/callback`);
  const org = await t.factories.org();
  orgId = org.orgId;
  await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', orgId).execute();
  client = t.as({ token: org.token, org: orgId });
  domain = await verifiedDomain(orgId);
  // The order an administrator follows: a draft for its redirect URI, registered at the IdP, then completed.
  const draft = await client.op('createSsoConnection', { body: { name: 'Acme IdP', type: 'oidc', domains: [domain], jit_provisioning: { enabled: true } } });
  connectionId = draft.body.id;
  await idp.configure(draft.body.oidc!.redirect_uri);
  const completed = await client.op('updateSsoConnection', {
    params: { id: connectionId },
    body: { oidc: { issuer: idp.issuer, client_id: idp.clientId, client_secret: idp.clientSecret } },
  });
  expect(completed.body.status).toBe('active');
});
afterAll(async () => {
  await t.close();
  await idp.close();
  await social.close();
});

const cookieIn = (res: { headers: Headers }, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0]
    ?.slice(name.length + 1);

async function start(query = ''): Promise<{ res: TestResponse; authorize: URL; flow: string }> {
  const res = await t.call('GET', `/auth/oidc/${connectionId}/login${query}`);
  expect(res.status).toBe(302);
  return { res, authorize: new URL(res.headers.get('location') as string), flow: cookieIn(res, 'cp_auth_flow') as string };
}

/** The browser at the provider: its sign-in page's button (or Cancel), then its redirects until one leads back to the app. */
async function atProvider(authorize: URL, choice: 'sign-in' | 'cancel' = 'sign-in', provider: OidcIdp = idp): Promise<URL> {
  const jar = new Map<string, string>();
  const go = async (url: URL, method = 'GET') => {
    const res = await fetch(url, { method, redirect: 'manual', headers: { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') } });
    for (const cookie of res.headers.getSetCookie()) {
      const [pair = ''] = cookie.split(';');
      const eq = pair.indexOf('=');
      const [name, value] = [pair.slice(0, eq), pair.slice(eq + 1)];
      if (value === '' || /expires=Thu, 01 Jan 1970/i.test(cookie)) jar.delete(name);
      else jar.set(name, value);
    }
    return res;
  };
  const page = await go(authorize);
  const interaction = new URL(page.headers.get('location') as string, provider.issuer);
  let res = await go(new URL(`${interaction.pathname}${choice === 'cancel' ? '/cancel' : ''}`, provider.issuer), 'POST');
  let next = new URL(res.headers.get('location') as string, provider.issuer);
  while (next.origin === provider.issuer) {
    res = await go(next);
    next = new URL(res.headers.get('location') as string, provider.issuer);
  }
  return next;
}

const callback = (url: URL, flow: string | null) =>
  t.call('GET', `${url.pathname}${url.search}`, undefined, { headers: flow === null ? {} : { cookie: `cp_auth_flow=${flow}` } });

async function signInThrough(subject: string, account: Parameters<OidcIdp['signInAs']>[1], returnTo?: string) {
  idp.signInAs(subject, account);
  const { authorize, flow } = await start(returnTo ? `?return_to=${encodeURIComponent(returnTo)}` : '');
  return callback(await atProvider(authorize), flow);
}

const failedWith = (res: TestResponse, reason: string) => {
  expect(res.status).toBe(302);
  expect(res.headers.get('location')).toBe(`${t.url}/sign-in?error=${reason}`);
  expect(cookieIn(res, '__Host-cp_session')).toBeUndefined();
};

const me = async (res: TestResponse) => (await t.call('GET', '/user/me', undefined, { session: cookieIn(res, '__Host-cp_session') })).body;
const membership = (userId: string) =>
  t.db.selectFrom('memberships').select(['status', 'via']).where('org_id', '=', orgId).where('user_id', '=', userId).executeTakeFirst();

describe('resolveSsoConnection', () => {
  it('answers from the domain: where to sign in, carrying login_hint and return_to', async () => {
    const email = `ada@${domain}`;
    const res = await t.op('resolveSsoConnection', { query: { email, return_to: '/org/acme' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      email_domain: domain,
      connection_id: connectionId,
      type: 'oidc',
      login_url: `/auth/oidc/${connectionId}/login?login_hint=${encodeURIComponent(email)}&return_to=%2Forg%2Facme`,
      enforced: false,
    });
  });

  it('answers nulls for a domain without SSO, and 400 for no address', async () => {
    expect((await t.op('resolveSsoConnection', { query: { email: 'someone@gmail.com' } })).body).toEqual({
      email_domain: 'gmail.com',
      connection_id: null,
      type: null,
      login_url: null,
      enforced: false,
    });
    expectError(await t.call('GET', '/auth/oidc/resolve'), 400, 'validation_failed');
  });
});

describe('startOidcLogin', () => {
  it('sends the browser to the identity provider with PKCE S256, state, nonce and login_hint, sealed in the flow cookie', async () => {
    const { res, authorize } = await start(`?login_hint=${encodeURIComponent(`ada@${domain}`)}`);
    expect(`${authorize.origin}${authorize.pathname}`).toBe(`${idp.issuer}/auth`);
    const q = authorize.searchParams;
    expect(q.get('client_id')).toBe(idp.clientId);
    expect(q.get('redirect_uri')).toBe(`${t.url}/auth/oidc/${connectionId}/callback`);
    expect(q.get('scope')).toBe('openid email profile');
    expect(q.get('code_challenge_method')).toBe('S256');
    expect(q.get('state')).toBeTruthy();
    expect(q.get('nonce')).toBeTruthy();
    expect(q.get('login_hint')).toBe(`ada@${domain}`);
    expect(res.headers.getSetCookie().find((c) => c.startsWith('cp_auth_flow='))).toMatch(/; Path=\/auth; HttpOnly; Secure; SameSite=Lax; Max-Age=600$/);
  });

  it('answers 404 for an unknown, draft, turned-off or SAML connection', async () => {
    expectError(await t.call('GET', `/auth/oidc/${newId('ssoConnection')}/login`), 404, 'not_found');
    const draft = (await client.op('createSsoConnection', { body: { name: `Draft ${unique()}`, type: 'oidc' } })).body;
    expectError(await t.call('GET', `/auth/oidc/${draft.id}/login`), 404, 'not_found');
    const saml = (await client.op('createSsoConnection', { body: { name: `Saml ${unique()}`, type: 'saml' } })).body;
    expectError(await t.call('GET', `/auth/oidc/${saml.id}/login`), 404, 'not_found');
    expectError(await t.call('GET', '/auth/oidc/sso_nope/login'), 400, 'validation_failed');
  });
});

describe('completeOidcLogin', () => {
  it('provisions a new person just in time: account, membership (sso_jit), session that records the connection', async () => {
    const email = `new-${unique()}@${domain}`;
    const subject = `sub-${unique()}`;
    const res = await signInThrough(subject, { email, name: 'Ada Lovelace' }, '/org/acme');
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`${t.url}/org/acme`);
    expect(res.headers.getSetCookie()).toContain('cp_auth_flow=; Path=/auth; HttpOnly; Secure; SameSite=Lax; Max-Age=0');
    const user = await me(res);
    expect(user.email).toBe(email);
    expect(await membership(user.id)).toEqual({ status: 'active', via: 'sso_jit' });
    const link = await t.db.selectFrom('sso_identities').selectAll().where('subject', '=', subject).executeTakeFirstOrThrow();
    expect(link).toMatchObject({ connection_id: connectionId, issuer: idp.issuer, user_id: user.id });
    const session = await t.db.selectFrom('sessions').select(['method', 'sso_connection_id']).where('user_id', '=', user.id).executeTakeFirstOrThrow();
    expect(session).toEqual({ method: 'sso', sso_connection_id: connectionId });
    const joined = (await t.factories.auditEntries(orgId)).filter((e) => e.action === 'member.joined' && e.target_id === user.id);
    expect(joined).toHaveLength(1);
    const events = await t.db.selectFrom('outbox').select('payload').where('org_id', '=', orgId).where('event_type', '=', 'member.joined').execute();
    expect(events.map((e) => e.payload)).toContainEqual({ member: { user_id: user.id, email, name: 'Ada Lovelace' }, via: 'sso_jit' });
    expect((await client.op('getSsoConnection', { params: { id: connectionId } })).body.last_sign_in_at).not.toBeNull();
  });

  it('signs a returning person in by (connection, issuer, subject), even after the email changed', async () => {
    const subject = `sub-${unique()}`;
    const first = await me(await signInThrough(subject, { email: `grace-${unique()}@${domain}` }));
    const again = await me(await signInThrough(subject, { email: `grace.new-${unique()}@${domain}` }));
    expect(again.id).toBe(first.id);
  });

  it('links the member SCIM provisioned by externalId, whatever the email says', async () => {
    const userId = await t.factories.user({ email: `provisioned-${unique()}@${domain}` });
    await t.factories.member(orgId, { userId, via: 'scim' });
    const objectId = `oid-${unique()}`;
    await t.db.updateTable('memberships').set({ external_id: objectId }).where('org_id', '=', orgId).where('user_id', '=', userId).execute();
    const res = await signInThrough(objectId, { email: `alias-${unique()}@${domain}` });
    expect((await me(res)).id).toBe(userId);
  });

  it('never adopts an existing account by email alone; a member of the organization is adopted', async () => {
    const email = `taken-${unique()}@${domain}`;
    const outsider = await t.factories.user({ email });
    failedWith(await signInThrough(`sub-${unique()}`, { email }), 'account_not_linked');
    expect(await t.db.selectFrom('sso_identities').select('subject').where('user_id', '=', outsider).execute()).toEqual([]);
    const invited = `invited-${unique()}@${domain}`;
    const memberId = await t.factories.user({ email: invited });
    await t.factories.member(orgId, { userId: memberId });
    expect((await me(await signInThrough(`sub-${unique()}`, { email: invited }))).id).toBe(memberId);
  });

  it('refuses an address of a domain the connection does not serve, and a suspended member', async () => {
    failedWith(await signInThrough(`sub-${unique()}`, { email: `x-${unique()}@elsewhere.example` }), 'email_unverified');
    failedWith(await signInThrough(`sub-${unique()}`, {}), 'email_unverified');
    const email = `suspended-${unique()}@${domain}`;
    const userId = await t.factories.user({ email });
    await t.factories.member(orgId, { userId, status: 'suspended' });
    failedWith(await signInThrough(`sub-${unique()}`, { email }), 'account_suspended');
  });

  it('without just-in-time provisioning, refuses a newcomer (not_provisioned) and creates nothing', async () => {
    await client.op('updateSsoConnection', { params: { id: connectionId }, body: { jit_provisioning: { enabled: false } } });
    try {
      const email = `late-${unique()}@${domain}`;
      failedWith(await signInThrough(`sub-${unique()}`, { email }), 'not_provisioned');
      expect(await t.db.selectFrom('users').select('id').where('email', '=', email).execute()).toEqual([]);
      // Someone the organization invited signs in, not yet a member: accepting the invite makes them one.
      const invited = `invited-late-${unique()}@${domain}`;
      expect((await client.post('/invite', { email: invited })).status).toBe(201);
      const res = await signInThrough(`sub-${unique()}`, { email: invited });
      expect(res.headers.get('location')).toBe(`${t.url}/`);
      const user = await me(res);
      expect(user.email).toBe(invited);
      expect(await membership(user.id)).toBeUndefined();
    } finally {
      await client.op('updateSsoConnection', { params: { id: connectionId }, body: { jit_provisioning: { enabled: true } } });
    }
  });

  it('refuses a flow of another browser, a changed state, and the person cancelling', async () => {
    idp.signInAs(`sub-${unique()}`, { email: `s-${unique()}@${domain}` });
    const { authorize, flow } = await start();
    const back = await atProvider(authorize);
    failedWith(await callback(back, null), 'invalid_state');
    const tampered = new URL(back);
    tampered.searchParams.set('state', 'another');
    failedWith(await callback(tampered, flow), 'invalid_state');
    const other = await start();
    failedWith(await callback(await atProvider(other.authorize, 'cancel'), other.flow), 'access_denied');
  });

  it('once enforced, resolve says so and the other sign-in paths refuse the domain (sso_required)', async () => {
    const email = `enforced-${unique()}@${domain}`;
    await signInThrough(`sub-${unique()}`, { email });
    // A person of the domain with a passkey, registered before enforcement.
    const withPasskey = await t.factories.user({ email: `passkey-${unique()}@${domain}` });
    const session = await t.factories.session(withPasskey);
    const authenticator = new SoftAuthenticator();
    const options = await t.call('POST', '/auth/passkey/registration/options', undefined, { session });
    expect((await t.call('POST', '/auth/passkey/registration/verify', { credential: authenticator.create(options.body, t.url) }, { session })).status).toBe(
      201,
    );
    const res = await client.op('updateSsoConnection', { params: { id: connectionId }, body: { enforce: true } });
    expect(res.body.enforce).toBe(true);
    try {
      expect((await t.op('resolveSsoConnection', { query: { email } })).body.enforced).toBe(true);
      // An emailed sign-in link of the domain no longer signs in.
      const userId = (await t.db.selectFrom('users').select('id').where('email', '=', email).executeTakeFirstOrThrow()).id;
      const link = await issueEmailLink(t.db, { purpose: 'sign_in', email, userId });
      const confirmed = await t.call('POST', '/auth/magic-link/verify', undefined, {
        raw: new URLSearchParams({ token: link.token }).toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
      expect(confirmed.status).toBe(303);
      expect(confirmed.headers.get('location')).toBe(`${t.url}/sign-in?error=sso_required`);
      const challenge = await t.call('POST', '/auth/passkey/authentication/options');
      expectError(await t.call('POST', '/auth/passkey/authentication/verify', { credential: authenticator.get(challenge.body, t.url) }), 403, 'sso_required');
      // Social sign-in with an address of the domain, before any account is made for it.
      const newcomer = `social-${unique()}@${domain}`;
      social.signInAs(`sub-${unique()}`, { email: newcomer, email_verified: true });
      const started = await t.call('GET', '/auth/sso/acme-id');
      const back = await atProvider(new URL(started.headers.get('location') as string), 'sign-in', social);
      failedWith(await callback(back, cookieIn(started, 'cp_auth_flow') as string), 'sso_required');
      expect(await t.db.selectFrom('users').select('id').where('email', '=', newcomer).execute()).toEqual([]);
      // The SSO sign-in itself still works.
      expect((await signInThrough(`sub-${unique()}`, { email: `again-${unique()}@${domain}` })).headers.get('location')).toBe(`${t.url}/`);
    } finally {
      await client.op('updateSsoConnection', { params: { id: connectionId }, body: { enforce: false } });
    }
  });
});
