import { hashSecret } from '../../src/lib/crypto';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { emailedLink, usePeers } from '../support/peers';

/**
 * Signing in with an emailed link: the request (JSON and the sign-in page's form), the link
 * that mail scanners may open without using it up, the confirmation that does, and the
 * pages around them. A real SMTP server on loopback receives the mail.
 */
const peers = usePeers();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
});
afterAll(() => t.close());

let n = 0;
const address = (name: string) => `${name.toLowerCase()}.${Date.now()}.${(n += 1)}@example.com`;
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();

async function person(name: string) {
  const email = address(name);
  const { orgId } = await t.factories.org();
  const userId = await t.factories.member(orgId, { userId: await t.factories.user({ email }) });
  return { email, userId, orgId };
}

const ask = (email: string, returnTo?: string) => t.call('POST', '/auth/magic-link', { email, ...(returnTo ? { return_to: returnTo } : {}) });
const confirm = (token: string, headers: Record<string, string> = {}) =>
  t.call('POST', '/auth/magic-link/verify', undefined, { raw: form({ token }), headers: { ...FORM, ...headers } });
const sessionIn = (res: { headers: Headers }) => /^__Host-cp_session=([^;]+);/.exec(res.headers.get('set-cookie') ?? '')?.[1];

describe('requestMagicLink', () => {
  it('answers 202 and emails a link that works once; only its hash is kept', async () => {
    const { email } = await person('Ada');
    const res = await ask(email, '/org/acme/toolboxes');
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ email, message: `If ${email} can use it, a link is on its way. It works once and expires in 15 minutes.` });

    const { token } = await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
    expect(token).toMatch(/^eml_[A-Za-z0-9_-]{43}$/);
    const row = await t.db.selectFrom('email_links').selectAll().where('token_hash', '=', hashSecret(token)).executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain(token);

    const signedIn = await confirm(token);
    expect(signedIn.status).toBe(303);
    expect(signedIn.headers.get('location')).toBe(`${t.url}/org/acme/toolboxes`);
    expect(signedIn.headers.get('set-cookie')).toMatch(/^__Host-cp_session=cps_[A-Za-z0-9_-]+; Path=\/; HttpOnly; Secure; SameSite=Lax; Max-Age=2592000$/);
    const me = await t.call('GET', '/user/me', undefined, { session: sessionIn(signedIn) });
    expect(me.status).toBe(200);
    expect(me.body.email).toBe(email);

    const again = await confirm(token);
    expect(again.status).toBe(303);
    expect(again.headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
    expect(again.headers.get('set-cookie')).toBeNull();
  });

  it('gives an address without an account the same answer and sends it nothing', async () => {
    const { email: known } = await person('Known');
    const unknown = address('Nobody');
    const res = await ask(unknown);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ email: unknown, message: `If ${unknown} can use it, a link is on its way. It works once and expires in 15 minutes.` });
    // Mail leaves in order: once a later email has arrived, none went to the unknown address.
    await ask(known);
    await emailedLink(peers.smtp, known, '/auth/magic-link/verify');
    expect(peers.smtp.messages.some((m) => m.to.includes(unknown))).toBe(false);
    expect(await t.db.selectFrom('email_links').select('user_id').where('email', '=', unknown).execute()).toEqual([{ user_id: null }]);
  });

  it('ends the earlier unused links of an address when a new one is asked for', async () => {
    const { email } = await person('Grace');
    await ask(email);
    const first = await emailedLink(peers.smtp, email, '/auth/magic-link/verify', 1);
    await ask(email);
    const second = await emailedLink(peers.smtp, email, '/auth/magic-link/verify', 2);
    expect((await confirm(first.token)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
    expect((await confirm(second.token)).headers.get('set-cookie')).toMatch(/^__Host-cp_session=/);
  });

  it('answers a form from the sign-in page with 303 to the page saying a link was sent', async () => {
    const { email } = await person('Form');
    const res = await t.call('POST', '/auth/magic-link', undefined, { raw: form({ email, return_to: '/org/x' }), headers: FORM });
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`${t.url}/sign-in?sent=${encodeURIComponent(email)}`);
    await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
  });

  it('429 rate_limited after five links in 15 minutes, for an address with an account or without alike', async () => {
    for (const email of [(await person('Busy')).email, address('Ghost')]) {
      for (let i = 0; i < 5; i += 1) expect((await ask(email)).status).toBe(202);
      const refused = await ask(email);
      expectError(refused, 429, 'rate_limited');
      expect(refused.headers.get('retry-after')).toBe('900');
    }
  });

  it('400 validation_failed for a malformed address, an absolute return_to or unknown members', async () => {
    expectError(await t.call('POST', '/auth/magic-link', { email: 'not-an-email' }), 400, 'validation_failed');
    expectError(await t.call('POST', '/auth/magic-link', { email: address('A'), return_to: 'https://evil.example/' }), 400, 'validation_failed');
    expectError(await t.call('POST', '/auth/magic-link', { email: address('A'), role: 'admin' }), 400, 'validation_failed');
  });
});

describe('verifyMagicLink (opening the emailed link)', () => {
  it('uses nothing up: a mail scanner opening it twice leaves the person their sign-in', async () => {
    const { email } = await person('Scanned');
    await ask(email);
    const { token } = await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
    for (let i = 0; i < 2; i += 1) {
      const opened = await t.call('GET', `/auth/magic-link/verify?token=${token}`);
      expect(opened.status).toBe(302);
      expect(opened.headers.get('location')).toBe(`${t.url}/sign-in/confirm?token=${token}`);
      expect(opened.headers.get('set-cookie')).toBeNull();
    }
    expect((await confirm(token)).headers.get('set-cookie')).toMatch(/^__Host-cp_session=/);
    const afterUse = await t.call('GET', `/auth/magic-link/verify?token=${token}`);
    expect(afterUse.headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
  });

  it('sends an expired or unknown link to the sign-in page with the reason', async () => {
    const { email } = await person('Late');
    await ask(email);
    const { token } = await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
    await t.db
      .updateTable('email_links')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('token_hash', '=', hashSecret(token))
      .execute();
    expect((await t.call('GET', `/auth/magic-link/verify?token=${token}`)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_expired`);
    expect((await confirm(token)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_expired`);
    const unknown = 'eml_' + 'x'.repeat(43);
    expect((await t.call('GET', `/auth/magic-link/verify?token=${unknown}`)).headers.get('location')).toBe(`${t.url}/sign-in?error=link_invalid`);
  });
});

describe('confirmMagicLink (the confirmation page’s button)', () => {
  it('403 insufficient_access from another site’s page, and the link still works from ours', async () => {
    const { email } = await person('Csrf');
    await ask(email);
    const { token } = await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
    expectError(await confirm(token, { origin: 'https://evil.example' }), 403, 'insufficient_access');
    expectError(await confirm(token, { 'sec-fetch-site': 'cross-site' }), 403, 'insufficient_access');
    const ours = await confirm(token, { origin: new URL(t.url).origin, 'sec-fetch-site': 'same-origin' });
    expect(ours.headers.get('set-cookie')).toMatch(/^__Host-cp_session=/);
  });

  it('ends the session this browser had before', async () => {
    const { email, userId } = await person('Twice');
    const before = await t.factories.session(userId);
    await ask(email);
    const { token } = await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
    const res = await confirm(token, { cookie: `__Host-cp_session=${before}` });
    expect(sessionIn(res)).toBeDefined();
    expectError(await t.call('GET', '/user/me', undefined, { session: before }), 401, 'invalid_token');
    expect((await t.call('GET', '/user/me', undefined, { session: sessionIn(res) })).status).toBe(200);
  });

  it('starts mfa_pending, for 10 minutes, when the person holds a factor and an organization requires one', async () => {
    const { email, userId, orgId } = await person('Careful');
    await t.factories.passkey(userId);
    await t.db.updateTable('organizations').set({ require_mfa: true }).where('id', '=', orgId).execute();
    await ask(email, '/org/acme');
    const { token } = await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
    const res = await confirm(token);
    expect(res.headers.get('location')).toBe(`${t.url}/sign-in/second-factor?return_to=%2Forg%2Facme`);
    const session = sessionIn(res)!;
    const row = await t.db
      .selectFrom('sessions')
      .select(['created_at', 'expires_at', 'second_factor_at'])
      .where('token_hash', '=', hashSecret(session))
      .executeTakeFirstOrThrow();
    expect(row.second_factor_at).toBeNull();
    expect(row.expires_at.getTime() - row.created_at.getTime()).toBeLessThanOrEqual(10 * 60_000 + 5_000);
    expect(res.headers.get('set-cookie')).toMatch(/Max-Age=600$/);
    expectError(await t.call('GET', '/organization/' + orgId, undefined, { session, org: orgId }), 403, 'mfa_setup_required');
  });

  it('never sends the person to another site, whatever return_to the link carries', async () => {
    const { email } = await person('Redirected');
    await ask(email, '/\t/evil.example');
    const { token } = await emailedLink(peers.smtp, email, '/auth/magic-link/verify');
    const location = (await confirm(token)).headers.get('location')!;
    expect(new URL(location).origin).toBe(new URL(t.url).origin);
  });

  it('400 validation_failed for a missing or malformed token', async () => {
    expectError(await t.call('POST', '/auth/magic-link/verify', undefined, { raw: form({}), headers: FORM }), 400, 'validation_failed');
    expectError(await t.call('POST', '/auth/magic-link/verify', undefined, { raw: form({ token: 'short' }), headers: FORM }), 400, 'validation_failed');
  });
});

describe('the sign-in pages', () => {
  it('serves the sign-in form as HTML under a strict content security policy', async () => {
    const res = await fetch(`${t.url}/sign-in?return_to=/org/acme`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toBe(
      "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; script-src 'self'; connect-src 'self'",
    );
    // A document: helmet's headers for documents too, beside those every answer carries.
    expect(res.headers.get('cross-origin-opener-policy')).toBe('same-origin');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    const page = await res.text();
    expect(page).toContain('<form method="post" action="/auth/magic-link">');
    expect(page).toContain('<label for="email">Email address</label>');
    expect(page).toContain('<input type="hidden" name="return_to" value="/org/acme" />');
    // The one script is this server's, for the passkey button (WebAuthn has no form); nothing inline.
    expect(page.match(/<script[^>]*>/g)).toEqual(['<script src="/assets/passkeys.js" defer>']);
  });

  it('escapes what the URL brings', async () => {
    const page = await (await fetch(`${t.url}/sign-in?sent=${encodeURIComponent('<img src=x onerror=alert(1)>@x.example')}`)).text();
    expect(page).not.toContain('<img');
    expect(page).toContain('&#60;img src=x onerror=alert(1)&#62;@x.example');
  });

  it('shows the confirmation button for a link, and sends a malformed one to the sign-in page', async () => {
    const token = 'eml_' + 'a'.repeat(43);
    const page = await (await fetch(`${t.url}/sign-in/confirm?token=${token}`)).text();
    expect(page).toContain(`<form method="post" action="/auth/magic-link/verify">`);
    expect(page).toContain(`<input type="hidden" name="token" value="${token}" />`);
    const bad = await fetch(`${t.url}/sign-in/confirm?token="><script>`, { redirect: 'manual' });
    expect(bad.status).toBe(303);
    expect(bad.headers.get('location')).toBe('/sign-in?error=link_invalid');
  });

  it('shows a plain error page for a known reason, and never what else the URL says', async () => {
    const known = await fetch(`${t.url}/error?reason=link_expired`);
    expect(known.status).toBe(400);
    expect(known.headers.get('content-security-policy')).toContain("default-src 'none'");
    const page = await known.text();
    expect(page).toContain('That sign-in link has expired.');
    expect(page).toContain('<a href="/sign-in">Go to the sign-in page</a>');
    const unknown = await fetch(`${t.url}/error?reason=${encodeURIComponent('<script>alert(1)</script>')}`);
    expect(unknown.status).toBe(404);
    const text = await unknown.text();
    expect(text).toContain('Something went wrong on the way.');
    expect(text).not.toContain('alert(1)');
  });

  it('sends a visitor who is not signed in from / to the sign-in page, and greets one who is', async () => {
    const anonymous = await fetch(`${t.url}/`, { redirect: 'manual' });
    expect(anonymous.status).toBe(303);
    expect(anonymous.headers.get('location')).toBe('/sign-in');
    const { email, userId } = await person('Home');
    const session = await t.factories.session(userId);
    const page = await (await fetch(`${t.url}/`, { headers: { cookie: `__Host-cp_session=${session}` } })).text();
    expect(page).toContain(`You are signed in as <strong>${email}</strong>`);
  });
});
