// The OAuth consent page as a person answers it, in a real browser (Debian's Chromium driven by
// playwright-core): an MCP client sends the person to /oauth/authorize; not signed in yet, they
// sign in by emailed link and come back to the consent page, which names the client, the
// redirect's host and warns that it is this computer; Allow takes the browser to the client's
// loopback redirect with code, state and iss (the page's CSP `form-action` lets the form's
// redirect through), Deny with `error=access_denied`.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { startTestApp, type TestApp } from '../support/app';
import { mintMcpServer, type MintedServer } from '../support/mcp';
import { emailedLink, usePeers } from '../support/peers';
import { CHROMIUM_OPTIONS } from './chromium';

const peers = usePeers();
let t: TestApp;
let browser: Browser;
/** The MCP client's loopback redirect: what arrived there. */
let receiver: Server;
let redirectUri: string;
const arrived: URL[] = [];

beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
  browser = await chromium.launch(CHROMIUM_OPTIONS);
  receiver = createServer((req, res) => {
    const url = new URL(req.url ?? '/', redirectUri);
    if (url.pathname === '/callback') arrived.push(url);
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>Client</title><p>You can close this window.</p>');
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  redirectUri = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/callback`;
});
afterAll(async () => {
  await browser?.close();
  receiver?.closeAllConnections();
  await new Promise((resolve) => receiver?.close(resolve));
  await t?.close();
});
afterEach(() => expect(t.specProblems).toEqual([]));

/** A person who owns an MCP server in an organization. */
async function personWithServer(name: string): Promise<{ email: string; server: MintedServer; orgName: string }> {
  const email = `${name.toLowerCase()}.${Date.now()}@example.com`;
  const userId = await t.factories.user({ email, name });
  const orgName = `${name}'s team`;
  const { orgId } = await t.factories.org({ name: orgName });
  await t.factories.member(orgId, { userId });
  const token = await t.factories.token(orgId, userId);
  const server = await mintMcpServer(t, { token, org: orgId }, { name: `${name}'s tools` });
  return { email, server, orgName };
}

/** A public client registered by RFC 7591 with the loopback redirect. */
async function registerClient(clientName: string): Promise<string> {
  const res = await t.op('registerOAuthClient', {
    body: { client_name: clientName, redirect_uris: [redirectUri], token_endpoint_auth_method: 'none', application_type: 'native' },
  });
  expect(res.status).toBe(201);
  return (res.body as { client_id: string }).client_id;
}

/** The authorization request an MCP client makes (PKCE S256, the server as resource), and its verifier. */
function authorization(clientId: string, server: MintedServer) {
  const verifier = randomBytes(32).toString('base64url');
  const state = randomBytes(12).toString('base64url');
  const url = new URL('/oauth/authorize', t.url);
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: clientId,
    redirect_uri: redirectUri,
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
    state,
    scope: 'mcp',
    resource: `${t.url}/mcp/${server.id}`,
  }).toString();
  return { url: url.href, verifier, state };
}

it('signs the person in, shows who asks and where the answer goes, and Allow lands on the client’s redirect with code, state and iss', async () => {
  const { email, server, orgName } = await personWithServer('Ada');
  const clientId = await registerClient('Claude Desktop (test)');
  const request = authorization(clientId, server);
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  const refusals: string[] = [];
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) refusals.push(message.text());
  });

  // Not signed in: the authorization sends the person to sign in, and back.
  await page.goto(request.url);
  expect(new URL(page.url()).pathname).toBe('/sign-in');
  const earlier = peers.smtp.messages.length;
  await page.getByLabel('Email address').fill(email);
  await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
  await page.getByRole('status').waitFor();
  await page.goto((await emailedLink(peers.smtp, email, '/auth/magic-link/verify', { after: earlier })).link);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: /Allow .* to use your MCP server\?/ }).waitFor();
  expect(new URL(page.url()).pathname).toBe('/oauth/consent');

  const text = (await page.locator('body').innerText()).replace(/\s+/g, ' ');
  expect(text).toContain('Allow Claude Desktop (test) to use your MCP server?');
  expect(text).toContain(`act as ${email} on the MCP server Ada's tools of ${orgName}`);
  expect(text).toContain(`your browser goes to ${new URL(redirectUri).host}`);
  expect(text).toContain('That address is on this computer');
  expect(text).toContain('Use the tools of this MCP server as you');

  await page.getByRole('button', { name: 'Allow' }).click();
  await page.waitForURL((url) => url.href.startsWith(redirectUri));
  await page.getByText('You can close this window.').waitFor();
  const landed = new URL(page.url());
  expect(landed.searchParams.get('state')).toBe(request.state);
  expect(landed.searchParams.get('iss')).toBe(t.url);
  const code = landed.searchParams.get('code');
  expect(code).toMatch(/^oacd_/);
  expect(arrived.at(-1)?.href).toBe(landed.href);
  expect(refusals).toEqual([]);

  // The code is good for tokens for that server.
  const tokens = await t.call('POST', '/oauth/token', undefined, {
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    raw: new URLSearchParams({
      grant_type: 'authorization_code',
      code: code as string,
      code_verifier: request.verifier,
      redirect_uri: redirectUri,
      client_id: clientId,
    }).toString(),
  });
  expect(tokens.status).toBe(200);
  expect(tokens.body).toMatchObject({ token_type: 'Bearer', scope: 'mcp', refresh_token: expect.stringMatching(/^mcprt_/) });
  await context.close();
});

it('Deny lands on the client’s redirect with error=access_denied, state and iss, and grants nothing', async () => {
  const { email, server } = await personWithServer('Grace');
  const clientId = await registerClient('Unwanted client');
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  const earlier = peers.smtp.messages.length;
  await page.goto(`${t.url}/sign-in`);
  await page.getByLabel('Email address').fill(email);
  await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
  await page.getByRole('status').waitFor();
  await page.goto((await emailedLink(peers.smtp, email, '/auth/magic-link/verify', { after: earlier })).link);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('You are signed in as').waitFor();

  // Signed in already: the authorization goes straight to the consent page.
  const request = authorization(clientId, server);
  await page.goto(request.url);
  await page.getByRole('heading', { name: 'Allow Unwanted client to use your MCP server?' }).waitFor();
  await page.getByRole('button', { name: 'Deny' }).click();
  await page.waitForURL((url) => url.href.startsWith(redirectUri));
  const landed = new URL(page.url());
  expect(Object.fromEntries(['error', 'state', 'iss', 'code'].map((n) => [n, landed.searchParams.get(n)]))).toEqual({
    error: 'access_denied',
    state: request.state,
    iss: t.url,
    code: null,
  });
  const grants = await t.db.selectFrom('oauth_grants').select('id').where('client_id', '=', clientId).execute();
  expect(grants).toEqual([]);

  // The request was answered: the page does not offer it again.
  await page.goBack();
  await page.reload();
  expect(await page.locator('body').innerText()).toContain('This authorization is no longer waiting');
  await context.close();
});
