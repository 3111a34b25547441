import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A real OpenID Connect provider on loopback (oidc-provider), standing in for Google or any
 * OIDC issuer in social sign-in tests. Its sign-in page is a form: pressing "Sign in" signs
 * in as the account `signInAs` chose last (and grants the scopes), "Cancel" answers the
 * client with `access_denied`. The issuer is known only once it listens, and the client's
 * redirect URI only once the app listens: `configure` makes the provider then.
 */
export interface Account {
  email?: string;
  email_verified?: boolean;
  name?: string;
}

export interface OidcIdp {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Creates the provider for the app's callback URL. */
  configure(redirectUri: string): Promise<void>;
  /** Who the next "Sign in" is, and what the provider says about them (changeable between sign-ins). */
  signInAs(subject: string, account: Account): void;
  close(): Promise<void>;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export async function startOidcIdp(): Promise<OidcIdp> {
  const accounts = new Map<string, Account>();
  let next: string | null = null;
  let provider: any = null;
  let callback: Handler | null = null;
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const interaction = /^\/interaction\/([^/]+)(\/cancel)?$/.exec(url.pathname);
    if (interaction && provider) {
      void interact(req, res, interaction[2] !== undefined).catch((err: Error) => {
        res.statusCode = 500;
        res.end(err.message);
      });
      return;
    }
    if (!callback) {
      res.statusCode = 503;
      res.end();
      return;
    }
    callback(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  const issuer = `http://127.0.0.1:${port}`;
  const clientId = 'control-plane';
  const clientSecret = 'idp-client-secret-for-tests-only-0123456789';

  async function interact(req: IncomingMessage, res: ServerResponse, cancel: boolean) {
    const details = await provider.interactionDetails(req, res);
    if (req.method === 'GET') {
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end(`<!doctype html><html lang="en"><head><title>Test IdP</title></head><body>
        <h1>Test identity provider</h1>
        <form method="post" action="/interaction/${details.uid}"><button type="submit">Sign in</button></form>
        <form method="post" action="/interaction/${details.uid}/cancel"><button type="submit">Cancel</button></form>
      </body></html>`);
      return;
    }
    if (cancel) {
      await provider.interactionFinished(req, res, { error: 'access_denied', error_description: 'The person cancelled.' }, { mergeWithLastSubmission: false });
      return;
    }
    if (!next) throw new Error('signInAs() was not called');
    const grant = new provider.Grant({ accountId: next, clientId: details.params.client_id });
    grant.addOIDCScope(String(details.params.scope));
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { login: { accountId: next }, consent: { grantId } }, { mergeWithLastSubmission: false });
  }

  function makeProvider(Provider: any, redirectUri: string, key: object) {
    return new Provider(issuer, {
      clients: [
        { client_id: clientId, client_secret: clientSecret, redirect_uris: [redirectUri], response_types: ['code'], grant_types: ['authorization_code'] },
      ],
      jwks: { keys: [key] },
      cookies: { keys: ['test-idp-cookie-key'] },
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
      // Google and Microsoft put the person's claims in the ID token: so does this provider.
      conformIdTokenClaims: false,
      features: { devInteractions: { enabled: false } },
      interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
      findAccount: (_ctx: unknown, sub: string) => ({ accountId: sub, claims: () => ({ sub, ...accounts.get(sub) }) }),
      ttl: { AuthorizationCode: 60, Interaction: 600, Grant: 600, Session: 600, AccessToken: 600, IdToken: 600 },
    });
  }

  return {
    issuer,
    clientId,
    clientSecret,
    async configure(redirectUri) {
      const { generateKeyPair, exportJWK } = await import('jose');
      const { privateKey } = await generateKeyPair('RS256', { extractable: true });
      const key = { ...(await exportJWK(privateKey)), alg: 'RS256', use: 'sig', kid: 'test' };
      // It warns, rightly for a real deployment, about Node 20 and its in-memory store; a test peer wants neither line.
      const warn = console.warn;
      console.warn = () => undefined;
      try {
        // ES modules only: loaded here (Jest transforms it), not at the top of a CommonJS file.
        // @ts-expect-error oidc-provider ships no type declarations.
        const { default: Provider } = await import('oidc-provider');
        provider = makeProvider(Provider, redirectUri, key);
      } finally {
        console.warn = warn;
      }
      callback = provider.callback();
    },
    signInAs(subject, account) {
      accounts.set(subject, account);
      next = subject;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
