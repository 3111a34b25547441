// Passkeys as a person uses them, in a real browser (Debian's Chromium driven by
// playwright-core) with Chromium's own virtual authenticator (CDP WebAuthn domain): sign in by
// emailed link, add a passkey on the security page, sign out, sign in with the passkey, and
// step up with it before deleting it.
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { startTestApp, type TestApp } from '../support/app';
import { emailedLink, usePeers } from '../support/peers';
import { CHROMIUM_OPTIONS } from './chromium';

const peers = usePeers();
let t: TestApp;
let browser: Browser;
/** The pages as the browser opens them: browsers refuse an IP address as a passkey's relying party. */
let site: string;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
  site = t.url.replace('127.0.0.1', 'localhost');
  // The web app's address is where links and sign-ins send the browser, and the passkeys' origin.
  const config = t.deps.config as { baseUrl: string; webAppUrl: string | null };
  config.baseUrl = site;
  config.webAppUrl = site;
  browser = await chromium.launch(CHROMIUM_OPTIONS);
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

/** A browser tab with a platform authenticator that holds passkeys and verifies its user. */
async function withAuthenticator(context: BrowserContext): Promise<{ page: Page; credentials: () => Promise<unknown[]> }> {
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      transport: 'internal',
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return { page, credentials: async () => (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials };
}

/** Signs in by emailed link on the sign-in page, as the person would. */
async function signInByLink(page: Page, email: string): Promise<void> {
  // Only a link sent from now on: an earlier sign-in's link is used up.
  const earlier = peers.smtp.messages.length;
  await page.goto(`${site}/sign-in`);
  await page.getByLabel('Email address').fill(email);
  await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
  await page.getByRole('status').waitFor();
  await page.goto((await emailedLink(peers.smtp, email, '/auth/magic-link/verify', { after: earlier })).link);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

it('adds a passkey on the security page, signs in with it after signing out, and steps up with it to delete it', async () => {
  const email = `lin.${Date.now()}@example.com`;
  const userId = await t.factories.user({ email });
  const context = await browser.newContext();
  const { page, credentials } = await withAuthenticator(context);
  page.on('dialog', (dialog) => void dialog.accept());

  await signInByLink(page, email);
  await page.getByText('You are signed in as').waitFor();

  // Adds a passkey: a discoverable credential now lives in the authenticator.
  await page.goto(`${site}/account/security`);
  expect(await page.getByText('You have no passkey yet.').count()).toBe(1);
  await page.getByRole('button', { name: 'Add a passkey' }).click();
  await page.getByRole('list', { name: 'Your passkeys' }).waitFor();
  expect(await page.getByRole('listitem').count()).toBe(1);
  const held = (await credentials()) as Array<{ isResidentCredential: boolean; rpId: string }>;
  expect(held).toHaveLength(1);
  expect(held[0]).toMatchObject({ isResidentCredential: true, rpId: 'localhost' });

  // Signs out (the browser forgets its session) and back in with the passkey alone.
  await context.clearCookies();
  await page.goto(`${site}/account/security`);
  expect(new URL(page.url()).pathname).toBe('/sign-in');
  await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
  await page.waitForURL(`${site}/account/security`);
  await page.getByRole('heading', { name: 'Security' }).waitFor();
  const session = await t.db
    .selectFrom('sessions')
    .select(['second_factor_method', 'step_up_at'])
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .orderBy('created_at', 'desc')
    .executeTakeFirstOrThrow();
  expect(session).toMatchObject({ second_factor_method: 'passkey', step_up_at: null });
  const used = await t.db.selectFrom('passkeys').select(['last_used_at']).where('user_id', '=', userId).executeTakeFirstOrThrow();
  expect(used.last_used_at).not.toBeNull();

  // Deleting a factor needs a step-up: the page asks the authenticator again, then deletes.
  await page.getByRole('button', { name: /^Delete / }).click();
  await page.getByText('You have no passkey yet.').waitFor();
  const steppedUp = await t.db
    .selectFrom('sessions')
    .select('step_up_at')
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .orderBy('created_at', 'desc')
    .executeTakeFirstOrThrow();
  expect(steppedUp.step_up_at).not.toBeNull();
  expect(await t.db.selectFrom('passkeys').select('id').where('user_id', '=', userId).execute()).toEqual([]);
  await context.close();
});

it('holds a person whose organization requires a second factor at the second-factor page until their passkey answers', async () => {
  const email = `kat.${Date.now()}@example.com`;
  const userId = await t.factories.user({ email });
  const { orgId } = await t.factories.org({ requireMfa: true });
  await t.factories.member(orgId, { userId });
  const context = await browser.newContext();
  const { page } = await withAuthenticator(context);

  await signInByLink(page, email);
  await page.getByText('You are signed in as').waitFor();
  await page.goto(`${site}/account/security`);
  await page.getByRole('button', { name: 'Add a passkey' }).click();
  await page.getByRole('list', { name: 'Your passkeys' }).waitFor();

  await context.clearCookies();
  await signInByLink(page, email);
  await page.getByRole('heading', { name: 'Second factor' }).waitFor();
  const held = await page.request.get(`${site}/organization/${orgId}`, { headers: { 'x-organization-id': orgId } });
  expect(held.status()).toBe(403);
  await page.getByRole('button', { name: 'Use a passkey' }).click();
  await page.getByText('You are signed in as').waitFor();
  const allowed = await page.request.get(`${site}/organization/${orgId}`, { headers: { 'x-organization-id': orgId } });
  expect(allowed.status()).toBe(200);
  await context.close();
});

it('shows why a passkey sign-in failed when the browser holds no passkey for this site', async () => {
  const context = await browser.newContext();
  const { page } = await withAuthenticator(context);
  await page.goto(`${site}/sign-in`);
  // Without a passkey the authenticator has nothing to offer: the browser reports it as a cancel.
  await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
  await page.getByRole('alert').waitFor({ timeout: 20_000 });
  expect(await page.getByRole('alert').textContent()).toMatch(/cancelled|timed out|did not work/);
  await context.close();
});
