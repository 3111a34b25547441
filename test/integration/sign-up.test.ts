import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { emailedLink, usePeers } from '../support/peers';

/**
 * Passwordless sign-up: the request (JSON and the sign-up page's form), the emailed link that
 * mail scanners may open without creating anything, the confirmation that creates the account
 * and signs in, resends, and joining organizations that verified the address's domain.
 */
const peers = usePeers();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
});
afterAll(() => t.close());

let n = 0;
const address = (name: string, domain = 'example.com') => `${name.toLowerCase()}.${Date.now()}.${(n += 1)}@${domain}`;
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();

const confirm = (token: string, headers: Record<string, string> = {}) =>
  t.call('POST', '/auth/signup/activate', undefined, { raw: form({ token }), headers: { ...FORM, ...headers } });
const sessionIn = (res: { headers: Headers }) => /^__Host-cp_session=([^;]+);/.exec(res.headers.get('set-cookie') ?? '')?.[1];
const usersWith = async (email: string) => (await t.db.selectFrom('users').select(['id', 'name']).where('email', '=', email).execute()).length;

describe('signUp and confirmSignup', () => {
  it('creates nothing until the emailed link is confirmed; then the account, named, signed in', async () => {
    const email = address('Ada');
    const res = await t.call('POST', '/auth/signup', { email, name: 'Ada Lovelace', return_to: '/onboarding' });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ email, message: `If ${email} can use it, a link is on its way. It works once and expires soon.` });
    const token = (await emailedLink(peers.smtp, email, '/auth/signup/activate')).token;

    // A mail scanner opens the link: it shows the confirmation page and creates nothing.
    for (let i = 0; i < 2; i += 1) {
      const opened = await t.call('GET', `/auth/signup/activate?token=${token}`);
      expect(opened.status).toBe(302);
      expect(opened.headers.get('location')).toBe(`${t.url}/sign-up/confirm?token=${token}`);
    }
    expect(await usersWith(email)).toBe(0);

    const created = await confirm(token);
    expect(created.status).toBe(303);
    expect(created.headers.get('location')).toBe(`${t.url}/onboarding`);
    const me = await t.call('GET', '/user/me', undefined, { session: sessionIn(created) });
    expect(me.body).toMatchObject({ email, name: 'Ada Lovelace', organizations: [] });

    const again = await confirm(token);
    expect(again.headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
    expect(await usersWith(email)).toBe(1);
  });

  it('gives an address with an account the same answer and emails it a sign-in link instead', async () => {
    const email = address('Known');
    await t.factories.user({ email });
    const res = await t.call('POST', '/auth/signup', { email });
    expect(res.body).toEqual({ email, message: `If ${email} can use it, a link is on its way. It works once and expires soon.` });
    await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
  });

  it('answers the sign-up page’s form with 303 to the page saying a link was sent', async () => {
    const email = address('Form');
    const res = await t.call('POST', '/auth/signup', undefined, { raw: form({ email, name: 'Form' }), headers: FORM });
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`${t.url}/sign-up?sent=${encodeURIComponent(email)}`);
    await emailedLink(peers.smtp, email, '/auth/signup/activate');
  });

  it('signs in the account registered meanwhile instead of making a second one', async () => {
    const email = address('Meanwhile');
    await t.call('POST', '/auth/signup', { email });
    const token = (await emailedLink(peers.smtp, email, '/auth/signup/activate')).token;
    const userId = await t.factories.user({ email });
    const res = await confirm(token);
    expect((await t.call('GET', '/user/me', undefined, { session: sessionIn(res) })).body.id).toBe(userId);
    expect(await usersWith(email)).toBe(1);
  });

  it('joins the organizations that verified the address’s domain with auto-join on: member.joined audited and emitted there', async () => {
    const domain = `acme${Date.now()}.example`;
    const { orgId } = await t.factories.org();
    await t.db
      .insertInto('org_domains')
      .values({ id: newId('orgDomain'), org_id: orgId, domain, status: 'verified', auto_join: true, verification_value: 'x', verified_at: new Date() })
      .execute();
    const { orgId: closed } = await t.factories.org();
    await t.db
      .insertInto('org_domains')
      .values({
        id: newId('orgDomain'),
        org_id: closed,
        domain: `other.${domain}`,
        status: 'verified',
        auto_join: true,
        verification_value: 'x',
        verified_at: new Date(),
      })
      .execute();

    const email = address('Joiner', domain);
    await t.call('POST', '/auth/signup', { email, name: 'Joiner' });
    const res = await confirm((await emailedLink(peers.smtp, email, '/auth/signup/activate')).token);
    const me = await t.call('GET', '/user/me', undefined, { session: sessionIn(res) });
    expect(me.body.organizations.map((o: any) => [o.organization.id, o.member.via])).toEqual([[orgId, 'verified_domain']]);

    const audit = await t.db
      .selectFrom('audit_log')
      .select(['action', 'actor_user_id', 'changes'])
      .where('org_id', '=', orgId)
      .where('action', '=', 'member.joined')
      .execute();
    expect(audit).toEqual([{ action: 'member.joined', actor_user_id: me.body.id, changes: expect.objectContaining({ via: 'verified_domain', domain }) }]);
    const events = await t.db.selectFrom('outbox').select('payload').where('org_id', '=', orgId).where('event_type', '=', 'member.joined').execute();
    expect(events.map((e) => e.payload)).toEqual([{ member: { user_id: me.body.id, email, name: 'Joiner' }, via: 'verified_domain' }]);
  });

  it('403 insufficient_access for a confirmation sent from another site, and the link still works from ours', async () => {
    const email = address('Csrf');
    await t.call('POST', '/auth/signup', { email });
    const token = (await emailedLink(peers.smtp, email, '/auth/signup/activate')).token;
    expectError(await confirm(token, { origin: 'https://evil.example' }), 403, 'insufficient_access');
    expect(await usersWith(email)).toBe(0);
    expect(sessionIn(await confirm(token, { origin: new URL(t.url).origin }))).toBeDefined();
  });

  it('400 validation_failed for a malformed address or unknown members', async () => {
    expectError(await t.call('POST', '/auth/signup', { email: 'nope' }), 400, 'validation_failed');
    expectError(await t.call('POST', '/auth/signup', { email: address('X'), admin: true }), 400, 'validation_failed');
  });
});

describe('resendSignupEmail', () => {
  it('sends a fresh link at most once a minute; the earlier link stops working', async () => {
    const email = address('Resend');
    await t.call('POST', '/auth/signup', { email, name: 'Resent' });
    const first = (await emailedLink(peers.smtp, email, '/auth/signup/activate', 1)).token;
    const tooSoon = await t.call('POST', '/auth/signup/resend', { email });
    expectError(tooSoon, 429, 'rate_limited');
    expect(tooSoon.headers.get('retry-after')).toBe('60');

    await t.db
      .updateTable('email_links')
      .set({ created_at: new Date(Date.now() - 61_000) })
      .where('email', '=', email)
      .execute();
    expect((await t.call('POST', '/auth/signup/resend', { email })).status).toBe(202);
    const second = (await emailedLink(peers.smtp, email, '/auth/signup/activate', 2)).token;
    expect((await confirm(first)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
    const res = await confirm(second);
    expect((await t.call('GET', '/user/me', undefined, { session: sessionIn(res) })).body.name).toBe('Resent');
  });

  it('answers an address with no registration the same, and sends nothing', async () => {
    const email = address('Stranger');
    const res = await t.call('POST', '/auth/signup/resend', { email });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ email, message: `If ${email} can use it, a link is on its way. It works once and expires soon.` });
    const known = address('After');
    await t.call('POST', '/auth/signup', { email: known });
    await emailedLink(peers.smtp, known, '/auth/signup/activate');
    expect(peers.smtp.messages.some((m) => m.to.includes(email))).toBe(false);
  });
});

describe('the sign-up pages', () => {
  it('serves the sign-up form and the confirmation button', async () => {
    const page = await (await fetch(`${t.url}/sign-up`)).text();
    expect(page).toContain('<form method="post" action="/auth/signup">');
    expect(page).toContain('<label for="name">Your name (optional)</label>');
    const token = 'eml_' + 'b'.repeat(43);
    const confirmPage = await (await fetch(`${t.url}/sign-up/confirm?token=${token}`)).text();
    expect(confirmPage).toContain('<form method="post" action="/auth/signup/activate">');
    expect(confirmPage).toContain(`value="${token}"`);
  });
});
