// Enterprise sign-in in a real browser (Debian's Chromium driven by playwright-core), through
// each kind of SSO connection: OpenID Connect against oidc-provider on loopback, and SAML
// against a small IdP page on loopback whose responses samlify builds and signs, posted back
// by the page's form as the HTTP-POST binding does.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { inflateRawSync } from 'node:zlib';
import { chromium, type Browser } from 'playwright-core';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { startOidcIdp, type OidcIdp } from '../support/oidc-idp';
import { startSamlIdp, type SamlIdp } from '../support/saml-idp';
import { CHROMIUM_OPTIONS } from './chromium';

let oidcIdp: OidcIdp;
let samlIdp: SamlIdp;
let samlPage: http.Server;
let t: TestApp;
let browser: Browser;
let oidcId: string;
let samlId: string;
let domain: string;
let spMetadata: string;
let nextSamlUser = '';

beforeAll(async () => {
  oidcIdp = await startOidcIdp();
  // The SAML IdP's sign-in page: it reads the AuthnRequest and answers with a form posting the signed response.
  samlPage = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/sso') {
      res.statusCode = 404;
      res.end();
      return;
    }
    const request = inflateRawSync(Buffer.from(url.searchParams.get('SAMLRequest') ?? '', 'base64')).toString('utf8');
    const id = /ID="([^"]+)"/.exec(request)?.[1] ?? '';
    const acs = /AssertionConsumerServiceURL="([^"]+)"/.exec(request)?.[1] ?? '';
    void samlIdp.respond(spMetadata, id, { nameId: nextSamlUser }).then((response) => {
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end(`<!doctype html><html lang="en"><head><title>Test SAML IdP</title></head><body>
        <form method="post" action="${acs}">
          <input type="hidden" name="SAMLResponse" value="${response}">
          <input type="hidden" name="RelayState" value="${url.searchParams.get('RelayState') ?? ''}">
          <button type="submit">Continue</button>
        </form></body></html>`);
    });
  });
  await new Promise<void>((resolve) => samlPage.listen(0, '127.0.0.1', () => resolve()));
  samlIdp = startSamlIdp(`http://127.0.0.1:${(samlPage.address() as AddressInfo).port}/sso`);
  t = await startTestApp();
  const org = await t.factories.org();
  await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', org.orgId).execute();
  const client = t.as({ token: org.token, org: org.orgId });
  domain = `d${Date.now()}.acme.example`;
  const other = `e${Date.now()}.acme.example`;
  for (const name of [domain, other]) {
    await t.db
      .insertInto('org_domains')
      .values({ id: newId('orgDomain'), org_id: org.orgId, domain: name, status: 'verified', verification_value: 'x', verified_at: new Date() })
      .execute();
  }
  const oidc = await client.op('createSsoConnection', { body: { name: 'Acme OIDC', type: 'oidc', domains: [domain], jit_provisioning: { enabled: true } } });
  oidcId = oidc.body.id;
  await oidcIdp.configure(oidc.body.oidc!.redirect_uri);
  await client.op('updateSsoConnection', {
    params: { id: oidcId },
    body: { oidc: { issuer: oidcIdp.issuer, client_id: oidcIdp.clientId, client_secret: oidcIdp.clientSecret } },
  });
  const saml = await client.op('createSsoConnection', {
    body: { name: 'Acme SAML', type: 'saml', domains: [other], jit_provisioning: { enabled: true }, saml: { metadata_xml: samlIdp.metadata } },
  });
  samlId = saml.body.id;
  spMetadata = (await t.call('GET', `/auth/saml/${samlId}/metadata`)).text;
  nextSamlUser = `grace.${Date.now()}@${other}`;
  browser = await chromium.launch(CHROMIUM_OPTIONS);
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
  await oidcIdp?.close();
  await new Promise((resolve) => samlPage?.close(resolve));
});

it('signs a person in through an OpenID Connect connection: the IdP page, then home', async () => {
  const email = `ada.sso.${Date.now()}@${domain}`;
  oidcIdp.signInAs(`sub-${Date.now()}`, { email, name: 'Ada' });
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${t.url}/auth/oidc/${oidcId}/login?login_hint=${encodeURIComponent(email)}`);
  await page.waitForURL((url) => url.origin === oidcIdp.issuer);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('You are signed in as').waitFor();
  expect(page.url()).toBe(`${t.url}/`);
  expect(await page.locator('strong').textContent()).toBe(email);
  expect((await context.cookies(t.url)).some((c) => c.name === '__Host-cp_session')).toBe(true);
  await context.close();
});

it('signs a person in through a SAML connection: the IdP page posts the response back, then home', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.goto(`${t.url}/auth/saml/${samlId}/login`);
  await page.getByRole('button', { name: 'Continue' }).waitFor();
  const flow = (await context.cookies()).find((c) => c.name === 'cp_auth_flow');
  expect(flow).toMatchObject({ httpOnly: true, secure: true, sameSite: 'None', path: '/auth' });
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByText('You are signed in as').waitFor();
  expect(page.url()).toBe(`${t.url}/`);
  expect(await page.locator('strong').textContent()).toBe(nextSamlUser);
  expect((await context.cookies()).some((c) => c.name === 'cp_auth_flow')).toBe(false);
  await context.close();
});
