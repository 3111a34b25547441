import { newId } from '../../src/lib/ids';
import { generate } from 'otplib';
import { startTestApp, type TestApp, type TestResponse } from '../support/app';
import { expectError } from '../support/client';
import { startGithubPeer, type GithubAccount, type GithubPeer } from '../support/github-peer';
import { startOidcIdp, type OidcIdp } from '../support/oidc-idp';

/**
 * Social sign-in against a real OpenID Connect provider on loopback (oidc-provider), and a
 * GitHub-shaped OAuth 2 server: the browser's whole path, followed redirect by redirect (the
 * app, the provider's pages and its cookies, the callback), and each way it must refuse.
 */
let idp: OidcIdp;
let github: GithubPeer;
let t: TestApp;
const KEY = 'acme-id';
beforeAll(async () => {
  idp = await startOidcIdp();
  github = await startGithubPeer();
  t = await startTestApp({
    env: {
      SOCIAL_PROVIDERS: `${KEY},github,down`,
      // A provider that is not there: nothing listens on port 9 of this machine.
      SOCIAL_DOWN_ISSUER: 'http://127.0.0.1:9',
      SOCIAL_DOWN_CLIENT_ID: 'down',
      SOCIAL_GITHUB_CLIENT_ID: github.clientId,
      SOCIAL_GITHUB_CLIENT_SECRET: github.clientSecret,
      SOCIAL_GITHUB_URL: github.url,
      SOCIAL_GITHUB_API_URL: github.apiUrl,
      SOCIAL_ACME_ID_ISSUER: idp.issuer,
      SOCIAL_ACME_ID_CLIENT_ID: idp.clientId,
      SOCIAL_ACME_ID_CLIENT_SECRET: idp.clientSecret,
      SOCIAL_ACME_ID_NAME: 'Acme ID',
    },
  });
  await idp.configure(`${t.url}/auth/sso/${KEY}/callback`);
});
afterAll(async () => {
  await t.close();
  await idp.close();
  await github.close();
});

let n = 0;
const unique = (name: string) => `${name}-${Date.now()}-${(n += 1)}`;
const address = (name: string) => `${unique(name).toLowerCase()}@example.com`;

const cookieIn = (res: { headers: Headers }, name: string) =>
  res.headers
    .getSetCookie()
    .find((c) => c.startsWith(`${name}=`))
    ?.split(';')[0]
    ?.slice(name.length + 1);

/** GET /auth/sso/{provider}: where the browser goes, and the flow cookie it now holds. */
async function start(returnTo?: string): Promise<{ res: TestResponse; authorize: URL; flow: string }> {
  const res = await t.call('GET', `/auth/sso/${KEY}${returnTo ? `?return_to=${encodeURIComponent(returnTo)}` : ''}`);
  expect(res.status).toBe(302);
  return { res, authorize: new URL(res.headers.get('location') as string), flow: cookieIn(res, 'cp_auth_flow') as string };
}

/** The browser at the provider: its sign-in page's button (or Cancel), then the provider's redirects, until one leads back to the app. */
async function atProvider(authorize: URL, choice: 'sign-in' | 'cancel' = 'sign-in'): Promise<URL> {
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
  expect(page.status).toBe(303);
  const interaction = new URL(page.headers.get('location') as string, idp.issuer);
  let res = await go(new URL(`${interaction.pathname}${choice === 'cancel' ? '/cancel' : ''}`, idp.issuer), 'POST');
  let next = new URL(res.headers.get('location') as string, idp.issuer);
  while (next.origin === idp.issuer) {
    res = await go(next);
    next = new URL(res.headers.get('location') as string, idp.issuer);
  }
  return next;
}

/** The provider's redirect reaching the app's callback, in a browser holding `flow` (or none). */
const callback = (url: URL, flow: string | null) =>
  t.call('GET', `${url.pathname}${url.search}`, undefined, { headers: flow === null ? {} : { cookie: `cp_auth_flow=${flow}` } });

/** The whole path: the account the provider signs in as, through to the app's answer. */
async function signInThrough(subject: string, account: Parameters<OidcIdp['signInAs']>[1], returnTo?: string) {
  idp.signInAs(subject, account);
  const { authorize, flow } = await start(returnTo);
  return callback(await atProvider(authorize), flow);
}

const failedWith = (res: TestResponse, reason: string) => {
  expect(res.status).toBe(302);
  expect(res.headers.get('location')).toBe(`${t.url}/sign-in?error=${reason}`);
  expect(cookieIn(res, '__Host-cp_session')).toBeUndefined();
};

const userByEmail = (email: string) => t.db.selectFrom('users').select(['id', 'name']).where('email', '=', email).executeTakeFirst();

describe('listAuthProviders', () => {
  it('lists the configured providers with where their sign-in starts', async () => {
    const res = await t.op('listAuthProviders');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      data: [
        { key: KEY, name: 'Acme ID', login_url: `/auth/sso/${KEY}` },
        { key: 'github', name: 'GitHub', login_url: '/auth/sso/github' },
        { key: 'down', name: 'down', login_url: '/auth/sso/down' },
      ],
    });
  });

  it('shows each provider on the sign-in page as a plain link, carrying return_to', async () => {
    const page = await (await fetch(`${t.url}/sign-in?return_to=${encodeURIComponent('/org/acme')}`)).text();
    expect(page).toContain(`<a href="/auth/sso/${KEY}?return_to=%2Forg%2Facme">Continue with Acme ID</a>`);
  });
});

describe('startSocialLogin', () => {
  it('sends the browser to the provider with PKCE S256, state and nonce, and seals them in a ten-minute flow cookie', async () => {
    const { res, authorize } = await start();
    expect(`${authorize.origin}${authorize.pathname}`).toBe(`${idp.issuer}/auth`);
    const q = authorize.searchParams;
    expect(q.get('response_type')).toBe('code');
    expect(q.get('client_id')).toBe(idp.clientId);
    expect(q.get('redirect_uri')).toBe(`${t.url}/auth/sso/${KEY}/callback`);
    expect(q.get('scope')).toBe('openid email profile');
    expect(q.get('code_challenge_method')).toBe('S256');
    expect(q.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(q.get('state')).toBeTruthy();
    expect(q.get('nonce')).toBeTruthy();
    const cookie = res.headers.getSetCookie().find((c) => c.startsWith('cp_auth_flow='));
    expect(cookie).toMatch(/^cp_auth_flow=v2\.[A-Za-z0-9._-]+; Path=\/auth; HttpOnly; Secure; SameSite=Lax; Max-Age=600$/);
    // Sealed: nothing of the flow's secrets is readable in it.
    expect(cookie).not.toContain(q.get('state') as string);
  });

  it('answers 404 for a provider that is not configured', async () => {
    expectError(await t.call('GET', '/auth/sso/nobody'), 404, 'not_found');
  });

  it('sends the browser back to the sign-in page with provider_error when the provider cannot be reached', async () => {
    const res = await t.call('GET', '/auth/sso/down');
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`${t.url}/sign-in?error=provider_error`);
    expect(cookieIn(res, 'cp_auth_flow')).toBeUndefined();
  });
});

describe('completeSocialLogin', () => {
  it('creates the account on a first sign-in with a verified email, and signs it in', async () => {
    const email = address('Ada');
    const subject = unique('sub');
    const res = await signInThrough(subject, { email, email_verified: true, name: 'Ada Lovelace' });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`${t.url}/`);
    const session = cookieIn(res, '__Host-cp_session');
    expect(session).toMatch(/^cps_/);
    expect(res.headers.getSetCookie()).toContain('cp_auth_flow=; Path=/auth; HttpOnly; Secure; SameSite=Lax; Max-Age=0');
    const me = await t.call('GET', '/user/me', undefined, { session });
    expect(me.status).toBe(200);
    expect(me.body.email).toBe(email);
    expect((await userByEmail(email))?.name).toBe('Ada Lovelace');
    const link = await t.db.selectFrom('social_identities').selectAll().where('subject', '=', subject).executeTakeFirstOrThrow();
    expect(link).toMatchObject({ provider: KEY, issuer: idp.issuer, user_id: me.body.id, email });
  });

  it('takes a new account into the organizations that verified its email’s domain with auto-join on (member.joined)', async () => {
    const domain = `${unique('acme').toLowerCase()}.example`;
    const { orgId } = await t.factories.org();
    await t.db
      .insertInto('org_domains')
      .values({ id: newId('orgDomain'), org_id: orgId, domain, status: 'verified', auto_join: true, verification_value: 'x', verified_at: new Date() })
      .execute();
    const email = `${unique('joiner').toLowerCase()}@${domain}`;
    const res = await signInThrough(unique('sub'), { email, email_verified: true, name: 'Joiner' });
    const me = await t.call('GET', '/user/me', undefined, { session: cookieIn(res, '__Host-cp_session') });
    expect(me.body.organizations.map((o: any) => [o.organization.id, o.member.via])).toEqual([[orgId, 'verified_domain']]);
    const events = await t.db.selectFrom('outbox').select('payload').where('org_id', '=', orgId).where('event_type', '=', 'member.joined').execute();
    expect(events.map((e) => e.payload)).toEqual([{ member: { user_id: me.body.id, email, name: 'Joiner' }, via: 'verified_domain' }]);
  });

  it('signs a returning person in by the provider subject, even after the email changed at the provider', async () => {
    const email = address('Grace');
    const subject = unique('sub');
    await signInThrough(subject, { email, email_verified: true });
    const first = await userByEmail(email);
    const again = await signInThrough(subject, { email: address('Grace.new'), email_verified: false });
    expect(again.status).toBe(302);
    expect(again.headers.get('location')).toBe(`${t.url}/`);
    const me = await t.call('GET', '/user/me', undefined, { session: cookieIn(again, '__Host-cp_session') });
    expect(me.body.id).toBe(first?.id);
    expect(me.body.email).toBe(email);
  });

  it('holds a person whose organization requires a second factor they hold at the second-factor page (mfa_pending)', async () => {
    const email = address('Held');
    const subject = unique('sub');
    const first = await signInThrough(subject, { email, email_verified: true });
    const session = cookieIn(first, '__Host-cp_session') as string;
    const userId = (await t.call('GET', '/user/me', undefined, { session })).body.id as string;
    const { orgId } = await t.factories.org({ requireMfa: true });
    await t.factories.member(orgId, { userId });
    const begun = await t.call('POST', '/user/me/mfa/totp', undefined, { session });
    expect((await t.call('POST', '/user/me/mfa/totp/verify', { code: await generate({ secret: begun.body.secret }) }, { session })).status).toBe(200);

    const again = await signInThrough(subject, { email, email_verified: true }, '/org/acme');
    expect(again.status).toBe(302);
    expect(again.headers.get('location')).toBe(`${t.url}/sign-in/second-factor?return_to=%2Forg%2Facme`);
    const pending = cookieIn(again, '__Host-cp_session');
    const held = await t.call('GET', `/organization/${orgId}`, undefined, { session: pending, org: orgId });
    expect(held.status).toBe(403);
  });

  it('creates one account when two first sign-ins of one person arrive at once', async () => {
    const email = address('Twice');
    idp.signInAs(unique('sub'), { email, email_verified: true });
    const flows = await Promise.all([start(), start()]);
    const backs = await Promise.all(flows.map((f) => atProvider(f.authorize)));
    const answers = await Promise.all(backs.map((back, i) => callback(back, flows[i]?.flow as string)));
    for (const res of answers) expect(res.headers.get('location')).toBe(`${t.url}/`);
    const ids = await Promise.all(
      answers.map(async (res) => (await t.call('GET', '/user/me', undefined, { session: cookieIn(res, '__Host-cp_session') })).body.id),
    );
    expect(ids[0]).toBe(ids[1]);
  });

  it('keeps return_to on the web app, and lands a foreign one on the home page', async () => {
    const kept = await signInThrough(unique('sub'), { email: address('Ret'), email_verified: true }, '/org/acme/toolboxes?tab=2');
    expect(kept.headers.get('location')).toBe(`${t.url}/org/acme/toolboxes?tab=2`);
    const foreign = await signInThrough(unique('sub'), { email: address('Evil'), email_verified: true }, '/\t/evil.example');
    expect(foreign.headers.get('location')).toBe(`${t.url}/`);
  });

  it('refuses an email the provider does not vouch for (email_unverified), and creates nothing', async () => {
    const email = address('Unverified');
    failedWith(await signInThrough(unique('sub'), { email, email_verified: false }), 'email_unverified');
    failedWith(await signInThrough(unique('sub'), { email }), 'email_unverified');
    failedWith(await signInThrough(unique('sub'), {}), 'email_unverified');
    expect(await userByEmail(email)).toBeUndefined();
  });

  it('never adopts an existing account with the same email (account_not_linked)', async () => {
    const email = address('Victim');
    const victim = await t.factories.user({ email });
    const subject = unique('sub');
    failedWith(await signInThrough(subject, { email, email_verified: true }), 'account_not_linked');
    expect(await t.db.selectFrom('social_identities').select('user_id').where('subject', '=', subject).executeTakeFirst()).toBeUndefined();
    // Whatever the email's case at the provider.
    failedWith(await signInThrough(unique('sub'), { email: email.toUpperCase(), email_verified: true }), 'account_not_linked');
    expect((await userByEmail(email))?.id).toBe(victim);
  });

  it('accepts the callback only in the browser that started the flow (invalid_state)', async () => {
    idp.signInAs(unique('sub'), { email: address('State'), email_verified: true });
    const mine = await start();
    const theirs = await start();
    const back = await atProvider(mine.authorize);
    failedWith(await callback(back, theirs.flow), 'invalid_state');
    failedWith(await callback(back, null), 'invalid_state');
    failedWith(await callback(back, 'v2.forged.cookie.value.x'), 'invalid_state');
  });

  it('refuses a flow older than ten minutes (invalid_state)', async () => {
    idp.signInAs(unique('sub'), { email: address('Late'), email_verified: true });
    const { authorize, flow } = await start();
    const back = await atProvider(authorize);
    const opened = JSON.parse(t.deps.secrets.open(flow, 'cp_auth_flow')) as { expiresAt: number };
    const expired = t.deps.secrets.seal(JSON.stringify({ ...opened, expiresAt: Date.now() - 1 }), 'cp_auth_flow');
    failedWith(await callback(back, expired), 'invalid_state');
  });

  it('sends a person who cancelled at the provider back with access_denied', async () => {
    idp.signInAs(unique('sub'), { email: address('Cancel'), email_verified: true });
    const { authorize, flow } = await start();
    const back = await atProvider(authorize, 'cancel');
    expect(back.searchParams.get('error')).toBe('access_denied');
    failedWith(await callback(back, flow), 'access_denied');
  });

  it('answers any other provider error with provider_error', async () => {
    const { authorize, flow } = await start();
    const url = new URL(`${t.url}/auth/sso/${KEY}/callback`);
    url.searchParams.set('error', 'server_error');
    url.searchParams.set('error_description', 'down for maintenance');
    url.searchParams.set('state', authorize.searchParams.get('state') as string);
    failedWith(await callback(url, flow), 'provider_error');
  });

  it('refuses a callback whose iss names another issuer, or leaves it out (RFC 9207: provider_error)', async () => {
    for (const iss of ['http://evil.example', null]) {
      idp.signInAs(unique('sub'), { email: address('Mixup'), email_verified: true });
      const { authorize, flow } = await start();
      const back = await atProvider(authorize);
      expect(back.searchParams.get('iss')).toBe(idp.issuer);
      if (iss === null) back.searchParams.delete('iss');
      else back.searchParams.set('iss', iss);
      failedWith(await callback(back, flow), 'provider_error');
    }
  });

  it('refuses a code used a second time (provider_error)', async () => {
    idp.signInAs(unique('sub'), { email: address('Replay'), email_verified: true });
    const { authorize, flow } = await start();
    const back = await atProvider(authorize);
    expect((await callback(back, flow)).headers.get('location')).toBe(`${t.url}/`);
    failedWith(await callback(back, flow), 'provider_error');
  });

  it('answers 404 for a provider that is not configured', async () => {
    expectError(await t.call('GET', '/auth/sso/nobody/callback?code=x&state=y'), 404, 'not_found');
  });
});

describe('completeSocialLogin with GitHub (OAuth 2 and its REST API)', () => {
  let ids = 1000;
  const account = (emails: GithubAccount['emails'], extra: Partial<GithubAccount> = {}): GithubAccount => ({
    id: (ids += 1),
    login: unique('octo'),
    emails,
    ...extra,
  });

  /** GitHub approves at once (the person approved the app before) and sends the browser back. */
  async function throughGithub(who: GithubAccount | 'deny') {
    if (who === 'deny') github.deny();
    else github.signInAs(who);
    const res = await t.call('GET', '/auth/sso/github');
    expect(res.status).toBe(302);
    const authorize = new URL(res.headers.get('location') as string);
    expect(`${authorize.origin}${authorize.pathname}`).toBe(`${github.url}/login/oauth/authorize`);
    expect(authorize.searchParams.get('code_challenge_method')).toBe('S256');
    expect(authorize.searchParams.get('scope')).toBe('read:user user:email');
    const atGithub = await fetch(authorize, { redirect: 'manual' });
    return callback(new URL(atGithub.headers.get('location') as string), cookieIn(res, 'cp_auth_flow') as string);
  }

  it('creates the account from the verified primary email, never the profile email, and links the numeric id', async () => {
    const primary = address('Octo');
    const who = account(
      [
        { email: address('Other'), primary: false, verified: true },
        { email: primary, primary: true, verified: true },
      ],
      { email: address('Public'), name: 'Octo Cat' },
    );
    const res = await throughGithub(who);
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`${t.url}/`);
    const me = await t.call('GET', '/user/me', undefined, { session: cookieIn(res, '__Host-cp_session') });
    expect(me.body.email).toBe(primary);
    expect(me.body.name).toBe('Octo Cat');
    const link = await t.db
      .selectFrom('social_identities')
      .selectAll()
      .where('provider', '=', 'github')
      .where('subject', '=', String(who.id))
      .executeTakeFirstOrThrow();
    expect(link).toMatchObject({ issuer: github.url, user_id: me.body.id, email: primary });
    expect(github.apiRequests.filter((r) => r.authorization?.startsWith('Bearer gho_')).map((r) => r.path)).toEqual(
      expect.arrayContaining(['/user', '/user/emails']),
    );
  });

  it('finds a returning person by the account id after the login and emails changed', async () => {
    const first = account([{ email: address('Before'), primary: true, verified: true }]);
    const before = await throughGithub(first);
    const userId = (await t.call('GET', '/user/me', undefined, { session: cookieIn(before, '__Host-cp_session') })).body.id;
    const again = await throughGithub({ ...first, login: unique('renamed'), emails: [{ email: address('After'), primary: true, verified: false }] });
    expect((await t.call('GET', '/user/me', undefined, { session: cookieIn(again, '__Host-cp_session') })).body.id).toBe(userId);
  });

  it('trusts only a verified primary email (email_unverified otherwise)', async () => {
    const email = address('Unverified.gh');
    failedWith(
      await throughGithub(
        account([
          { email, primary: true, verified: false },
          { email: address('Verified.secondary'), primary: false, verified: true },
        ]),
      ),
      'email_unverified',
    );
    failedWith(await throughGithub(account([], { email: address('Public.only') })), 'email_unverified');
    expect(await userByEmail(email)).toBeUndefined();
  });

  it('never adopts an existing account with the primary email (account_not_linked)', async () => {
    const email = address('Taken');
    await t.factories.user({ email });
    failedWith(await throughGithub(account([{ email, primary: true, verified: true }])), 'account_not_linked');
  });

  it('refuses a code used a second time: GitHub says so in a 200 answer (provider_error)', async () => {
    github.signInAs(account([{ email: address('Replay.gh'), primary: true, verified: true }]));
    const res = await t.call('GET', '/auth/sso/github');
    const flow = cookieIn(res, 'cp_auth_flow') as string;
    const back = new URL((await fetch(res.headers.get('location') as string, { redirect: 'manual' })).headers.get('location') as string);
    expect((await callback(back, flow)).headers.get('location')).toBe(`${t.url}/`);
    failedWith(await callback(back, flow), 'provider_error');
  });

  it('sends a person who denied the app back with access_denied', async () => {
    failedWith(await throughGithub('deny'), 'access_denied');
  });
});
