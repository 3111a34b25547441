// Signing in through a social provider in a real browser (Debian's Chromium driven by
// playwright-core): the provider's link on the sign-in page, the provider's own page
// (oidc-provider on loopback), and back to the signed-in home page.
import { chromium, type Browser } from 'playwright-core';
import { startTestApp, type TestApp } from '../support/app';
import { startOidcIdp, type OidcIdp } from '../support/oidc-idp';
import { CHROMIUM_OPTIONS } from './chromium';

let idp: OidcIdp;
let t: TestApp;
let browser: Browser;
beforeAll(async () => {
  idp = await startOidcIdp();
  t = await startTestApp({
    env: {
      SOCIAL_PROVIDERS: 'acme-id',
      SOCIAL_ACME_ID_ISSUER: idp.issuer,
      SOCIAL_ACME_ID_CLIENT_ID: idp.clientId,
      SOCIAL_ACME_ID_CLIENT_SECRET: idp.clientSecret,
      SOCIAL_ACME_ID_NAME: 'Acme ID',
    },
  });
  await idp.configure(`${t.url}/auth/sso/acme-id/callback`);
  browser = await chromium.launch(CHROMIUM_OPTIONS);
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
  await idp?.close();
});

it('signs a new person up and in through the provider: its link on the sign-in page, its page, then home', async () => {
  const email = `ada.social.${Date.now()}@example.com`;
  idp.signInAs(`sub-${Date.now()}`, { email, email_verified: true, name: 'Ada' });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);

  await page.goto(`${t.url}/`);
  expect(new URL(page.url()).pathname).toBe('/sign-in');
  await page.getByRole('link', { name: 'Continue with Acme ID' }).click();
  await page.waitForURL((url) => url.origin === idp.issuer);
  // Its path is /auth: asked for without a URL, or the browser leaves it out.
  const flow = (await context.cookies()).find((c) => c.name === 'cp_auth_flow');
  expect(flow).toMatchObject({ httpOnly: true, secure: true, sameSite: 'Lax', path: '/auth' });

  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('You are signed in as').waitFor();
  expect(page.url()).toBe(`${t.url}/`);
  expect(await page.locator('strong').textContent()).toBe(email);
  const cookies = await context.cookies(t.url);
  expect(cookies.find((c) => c.name === '__Host-cp_session')).toMatchObject({ httpOnly: true, secure: true, sameSite: 'Lax', path: '/' });
  expect((await context.cookies()).some((c) => c.name === 'cp_auth_flow')).toBe(false);
  await context.close();
});

it('brings a person who cancels at the provider back to the sign-in page, saying so', async () => {
  idp.signInAs(`sub-${Date.now()}`, { email: `cancel.${Date.now()}@example.com`, email_verified: true });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${t.url}/sign-in`);
  await page.getByRole('link', { name: 'Continue with Acme ID' }).click();
  await page.getByRole('button', { name: 'Cancel' }).click();
  await page.getByRole('alert').waitFor();
  expect(await page.getByRole('alert').textContent()).toContain('Sign-in was cancelled.');
  expect((await context.cookies(t.url)).some((c) => c.name === '__Host-cp_session')).toBe(false);
  await context.close();
});
