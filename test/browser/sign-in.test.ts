// Signing in as a person does it, in a real browser (Debian's Chromium driven by
// playwright-core): the sign-in page, the email that arrives at a real SMTP server, the
// emailed link, the confirmation page's button, and the signed-in home page.
import { generate } from 'otplib';
import { chromium, type Browser } from 'playwright-core';
import { startTestApp, type TestApp } from '../support/app';
import { emailedLink, usePeers } from '../support/peers';
import { CHROMIUM_OPTIONS } from './chromium';

const peers = usePeers();
let t: TestApp;
let browser: Browser;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
  browser = await chromium.launch(CHROMIUM_OPTIONS);
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

it('signs a person in by emailed link: ask on the sign-in page, open the link, press the button', async () => {
  const email = `ada.${Date.now()}@example.com`;
  await t.factories.user({ email });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);

  await page.goto(`${t.url}/`);
  expect(new URL(page.url()).pathname).toBe('/sign-in');
  await page.getByLabel('Email address').fill(email);
  await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
  await page.getByRole('status').waitFor();
  expect(await page.getByRole('status').textContent()).toContain(`If ${email} has an account, a sign-in link is on its way.`);

  // The link a mail scanner would open too: it shows a button and signs nobody in.
  await page.goto((await emailedLink(peers.smtp, email, '/auth/magic-link/verify')).link);
  expect(new URL(page.url()).pathname).toBe('/sign-in/confirm');
  expect((await context.cookies()).some((c) => c.name === '__Host-cp_session')).toBe(false);

  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForLoadState();
  await page.getByText('You are signed in as').waitFor();
  expect(new URL(page.url()).pathname).toBe('/');
  expect(await page.locator('strong').textContent()).toBe(email);
  const cookie = (await context.cookies()).find((c) => c.name === '__Host-cp_session');
  expect(cookie).toMatchObject({ httpOnly: true, secure: true, sameSite: 'Lax', path: '/' });

  // The API knows the person by that cookie.
  const me = await page.request.get(`${t.url}/user/me`);
  expect(me.status()).toBe(200);
  expect((await me.json()).email).toBe(email);
  await context.close();
});

it('holds a person whose organization requires a second factor at the second-factor page until they show a code', async () => {
  const email = `grace.${Date.now()}@example.com`;
  const userId = await t.factories.user({ email });
  const { orgId } = await t.factories.org({ requireMfa: true });
  await t.factories.member(orgId, { userId });
  // The person set up an authenticator app earlier.
  const setup = await t.factories.session(userId);
  const begun = await t.call('POST', '/user/me/mfa/totp', undefined, { session: setup });
  const secret: string = begun.body.secret;
  await t.call('POST', '/user/me/mfa/totp/verify', { code: await generate({ secret }) }, { session: setup });

  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${t.url}/sign-in?return_to=/`);
  await page.getByLabel('Email address').fill(email);
  await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
  await page.getByRole('status').waitFor();
  await page.goto((await emailedLink(peers.smtp, email, '/auth/magic-link/verify')).link);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Second factor' }).waitFor();
  expect(new URL(page.url()).pathname).toBe('/sign-in/second-factor');
  // The organization refuses this session until it shows the factor.
  const held = await page.request.get(`${t.url}/organization/${orgId}`, { headers: { 'x-organization-id': orgId } });
  expect(held.status()).toBe(403);
  expect((await held.json()).code).toBe('mfa_setup_required');

  await page.getByLabel('Code from the app').fill('000000');
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.waitForLoadState();
  await page.getByRole('alert').waitFor();
  expect(await page.getByRole('alert').textContent()).toContain('That code did not work');

  await page.getByLabel('Code from the app').fill(await generate({ secret, epoch: Math.floor(Date.now() / 1000) + 30 }));
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByText('You are signed in as').waitFor();
  const allowed = await page.request.get(`${t.url}/organization/${orgId}`, { headers: { 'x-organization-id': orgId } });
  expect(allowed.status()).toBe(200);
  await context.close();
});

it('logs a person out with the button on the home page: the cookie is gone and the session ends', async () => {
  const email = `lin.${Date.now()}@example.com`;
  await t.factories.user({ email });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${t.url}/sign-in`);
  await page.getByLabel('Email address').fill(email);
  await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
  await page.getByRole('status').waitFor();
  await page.goto((await emailedLink(peers.smtp, email, '/auth/magic-link/verify')).link);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('You are signed in as').waitFor();
  const session = (await context.cookies()).find((c) => c.name === '__Host-cp_session')!.value;

  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  expect(new URL(page.url()).pathname).toBe('/sign-in');
  expect((await context.cookies()).some((c) => c.name === '__Host-cp_session')).toBe(false);
  expect((await t.call('GET', '/user/me', undefined, { session })).status).toBe(401);
  await context.close();
});

it('signs a person up: the sign-up page, the emailed link, the button that creates the account', async () => {
  const email = `new.${Date.now()}@example.com`;
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${t.url}/sign-in`);
  await page.getByRole('link', { name: 'Create an account' }).click();
  await page.getByLabel('Email address').fill(email);
  await page.getByLabel('Your name (optional)').fill('New Person');
  await page.getByRole('button', { name: 'Email me a link to finish' }).click();
  await page.getByRole('status').waitFor();
  const { link } = await emailedLink(peers.smtp, email, '/auth/signup/activate');
  await page.goto(link);
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.getByText('You are signed in as').waitFor();
  expect(await page.locator('strong').textContent()).toBe(email);
  const me = await page.request.get(`${t.url}/user/me`);
  expect((await me.json()).name).toBe('New Person');
  await context.close();
});

it('sets up an authenticator app on the security page: the secret, a code from it, the recovery codes shown once', async () => {
  const email = `totp.${Date.now()}@example.com`;
  await t.factories.user({ email });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${t.url}/sign-in?return_to=/account/security`);
  await page.getByLabel('Email address').fill(email);
  await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
  await page.getByRole('status').waitFor();
  await page.goto((await emailedLink(peers.smtp, email, '/auth/magic-link/verify')).link);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Security' }).waitFor();

  await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
  const secret = (await page.locator('#totp-secret').textContent())!;
  expect(secret).toMatch(/^[A-Z2-7]{32}$/);
  await page.getByLabel('Code from the app').fill(await generate({ secret }));
  await page.getByRole('button', { name: 'Turn on' }).click();
  await page.getByRole('list', { name: 'Recovery codes' }).waitFor();
  expect(await page.getByRole('list', { name: 'Recovery codes' }).getByRole('listitem').count()).toBe(10);
  const me = await page.request.get(`${t.url}/user/me`);
  expect((await me.json()).mfa_enabled).toBe(true);
  await page.reload();
  await page.getByText('recovery codes left').waitFor();
  await context.close();
});
