/**
 * What the real-client OAuth tests share: an MCP SDK `OAuthClientProvider` that keeps
 * everything in memory and remembers the authorization URL it was sent to, a `fetch` that
 * holds every answer of the app to the spec (the SDK's own requests never pass through
 * `t.call`), and the person's part of the flow done over HTTP as a browser would: open the
 * authorization URL with the session cookie, follow it to the consent page, submit its form.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { TestApp } from './app';
import { SpecChecker } from './spec-checker';

export class MemoryOAuthProvider implements OAuthClientProvider {
  information: OAuthClientInformationMixed | undefined;
  stored: OAuthTokens | undefined;
  verifier: string | undefined;
  /** Every authorization URL the client sent the person to, latest last. */
  readonly authorizationUrls: URL[] = [];
  /** Every `state` the client made, latest last. */
  readonly states: string[] = [];

  constructor(
    private readonly redirect: string,
    private readonly options: { clientMetadataUrl?: string; clientName?: string } = {},
  ) {}

  get clientMetadataUrl(): string | undefined {
    return this.options.clientMetadataUrl;
  }

  get redirectUrl(): string {
    return this.redirect;
  }

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: this.options.clientName ?? 'SDK test client',
      redirect_uris: [this.redirect],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      application_type: 'native',
    } as OAuthClientMetadata;
  }

  state(): string {
    const state = randomBytes(12).toString('base64url');
    this.states.push(state);
    return state;
  }

  clientInformation() {
    return this.information;
  }

  saveClientInformation(information: OAuthClientInformationMixed): void {
    this.information = information;
  }

  tokens() {
    return this.stored;
  }

  saveTokens(tokens: OAuthTokens): void {
    this.stored = tokens;
  }

  redirectToAuthorization(url: URL): void {
    this.authorizationUrls.push(url);
  }

  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier;
  }

  codeVerifier(): string {
    if (!this.verifier) throw new Error('No code verifier saved.');
    return this.verifier;
  }

  /** What the SDK forgets when the server refuses it (a refused refresh drops the tokens). */
  invalidateCredentials(scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery'): void {
    if (scope === 'all' || scope === 'client') this.information = undefined;
    if (scope === 'all' || scope === 'tokens') this.stored = undefined;
    if (scope === 'all' || scope === 'verifier') this.verifier = undefined;
  }

  get lastAuthorizationUrl(): URL {
    const url = this.authorizationUrls.at(-1);
    if (!url) throw new Error('The client never sent the person to the authorization endpoint.');
    return url;
  }
}

let checker: SpecChecker | null = null;

/**
 * A `fetch` for the SDK's transport: requests to the app are answered as usual, and each
 * answer is held to the spec first (as `t.call` does); a mismatch throws and is kept in
 * `t.specProblems`. The answer's body is read once to check it and handed on intact.
 */
export function specCheckedFetch(t: TestApp): typeof fetch {
  checker ??= new SpecChecker();
  const spec = checker;
  return async (input, init) => {
    const request = new Request(input, init);
    const response = await fetch(input, init);
    const url = new URL(request.url);
    if (url.origin !== new URL(t.url).origin) return response;
    const type = response.headers.get('content-type') ?? '';
    // An event stream stays open while the session lasts; its head is what the spec describes.
    if (type.includes('text/event-stream')) {
      const problems = spec.check(request.method.toLowerCase(), url.pathname, response.status, response.headers, '', t.pending);
      return failOn(
        t,
        request,
        problems.filter((p) => !p.includes('does not match the spec')),
        response,
      );
    }
    const text = await response.text();
    const body = text === '' ? undefined : type.includes('json') ? JSON.parse(text) : text;
    if (request.method === 'GET' && /^\/mcp\/[^/]+$/.test(url.pathname) && response.status === 405) {
      // The endpoint's description says so (no GET stream; 405, Allow: POST, DELETE, a JSON-RPC
      // error): a path-level exception the checker, which knows operations only, cannot read.
      const refusal = body as { jsonrpc?: string; error?: { code?: number } } | undefined;
      const problems =
        /\bPOST\b/.test(response.headers.get('allow') ?? '') && refusal?.jsonrpc === '2.0' && refusal.error?.code === -32600
          ? []
          : [`GET ${url.pathname} 405 is not the documented refusal: ${text}`];
      return failOn(t, request, problems, new Response(text, response));
    }
    const problems = spec.check(request.method.toLowerCase(), url.pathname, response.status, response.headers, body, t.pending);
    return failOn(t, request, problems, new Response(text === '' && [204, 304].includes(response.status) ? null : text, response));
  };
}

function failOn(t: TestApp, request: Request, problems: string[], response: Response): Response {
  if (problems.length > 0) {
    t.specProblems.push(...problems);
    throw new Error(`Response of ${request.method} ${new URL(request.url).pathname} breaks the spec:\n${problems.join('\n')}`);
  }
  return response;
}

export const sessionCookie = (session: string) => `__Host-cp_session=${session}`;

export interface ConsentOutcome {
  /** The consent page as the person saw it. */
  page: string;
  /** Where the decision sent the browser: the client's redirect URI with the answer. */
  location: URL;
}

/**
 * The person's part: open the client's authorization URL signed in, follow it to the consent
 * page, read the page and submit its form with `decision`. Every step but the page itself is
 * an operation of the spec and goes through `t.call`.
 */
export async function consentInBrowserSteps(
  t: TestApp,
  authorizationUrl: URL,
  session: string,
  decision: 'approve' | 'deny' = 'approve',
): Promise<ConsentOutcome> {
  const origin = new URL(t.url).origin;
  if (authorizationUrl.origin !== origin) throw new Error(`The client went to ${authorizationUrl.origin} to authorize, not to the app (${origin}).`);
  const authorized = await t.call('GET', `${authorizationUrl.pathname}${authorizationUrl.search}`, undefined, { session });
  if (authorized.status !== 302) throw new Error(`GET /oauth/authorize answered ${authorized.status}: ${authorized.text}`);
  const consent = new URL(authorized.headers.get('location') as string, t.url);
  if (consent.pathname !== '/oauth/consent') throw new Error(`The authorization went to ${consent.href}, not to the consent page.`);
  // The page is not an operation of the API: fetched as a browser would, with the cookie.
  const shown = await fetch(new URL(`${consent.pathname}${consent.search}`, t.url), { headers: { cookie: sessionCookie(session) }, redirect: 'manual' });
  const page = await shown.text();
  if (shown.status !== 200) throw new Error(`The consent page answered ${shown.status}: ${page}`);
  const request = /name="request" value="([^"]+)"/.exec(page)?.[1];
  if (!request) throw new Error(`The consent page has no request field:\n${page}`);
  const decided = await t.call('POST', '/oauth/consent/decision', undefined, {
    session,
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin, 'sec-fetch-site': 'same-origin' },
    raw: new URLSearchParams({ request, decision }).toString(),
  });
  if (decided.status !== 303) throw new Error(`POST /oauth/consent/decision answered ${decided.status}: ${decided.text}`);
  return { page, location: new URL(decided.headers.get('location') as string) };
}

/**
 * An MCP client's grant, the short way: a public client registered for a loopback redirect,
 * the person's consent in `session`, the code exchanged for tokens of `resource`.
 */
export async function grantByConsent(
  t: TestApp,
  session: string,
  resource: string,
): Promise<{ clientId: string; access_token: string; refresh_token: string }> {
  const redirect = 'http://127.0.0.1:33419/callback';
  const registered = await t.call('POST', '/oauth/register', { redirect_uris: [redirect], token_endpoint_auth_method: 'none', client_name: 'Granted client' });
  if (registered.status !== 201) throw new Error(`POST /oauth/register answered ${registered.status}: ${registered.text}`);
  const clientId = (registered.body as { client_id: string }).client_id;
  const verifier = randomBytes(32).toString('base64url');
  const authorization = new URL('/oauth/authorize', t.url);
  authorization.search = new URLSearchParams({
    response_type: 'code',
    client_id: clientId,
    redirect_uri: redirect,
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
    resource,
  }).toString();
  const { location } = await consentInBrowserSteps(t, authorization, session);
  const code = location.searchParams.get('code');
  if (!code) throw new Error(`The consent sent no code back: ${location.href}`);
  const exchanged = await t.call('POST', '/oauth/token', undefined, {
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    raw: new URLSearchParams({
      grant_type: 'authorization_code',
      code,
      code_verifier: verifier,
      redirect_uri: redirect,
      client_id: clientId,
      resource,
    }).toString(),
  });
  if (exchanged.status !== 200) throw new Error(`POST /oauth/token answered ${exchanged.status}: ${exchanged.text}`);
  return { clientId, ...(exchanged.body as { access_token: string; refresh_token: string }) };
}

/**
 * A self-signed certificate for 127.0.0.1, made with openssl for this run, and a way to make
 * this process trust it while a test needs it: the app's outbound https calls (to a client's
 * metadata document on loopback) check certificates against Node's default roots, which a
 * test cannot extend once the process has started (NODE_EXTRA_CA_CERTS is read at start).
 */
export function loopbackCertificate(): { key: Buffer; cert: Buffer; trust: () => () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'oauth-tls-'));
  const made = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    { encoding: 'utf8' },
  );
  if (made.status !== 0) throw new Error(`openssl could not make a certificate: ${made.stderr}`);
  const key = readFileSync(join(dir, 'key.pem'));
  const cert = readFileSync(join(dir, 'cert.pem'));
  rmSync(dir, { recursive: true, force: true });
  const trust = () => {
    const original = tls.createSecureContext;
    tls.createSecureContext = (options?: tls.SecureContextOptions) => {
      const context = original(options);
      // Only contexts on the default roots: one given its own CAs keeps exactly those.
      if (!options?.ca) (context.context as { addCACert(cert: Buffer): void }).addCACert(cert);
      return context;
    };
    return () => {
      tls.createSecureContext = original;
    };
  };
  return { key, cert, trust };
}
