import { createHash, randomBytes } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A GitHub-shaped OAuth 2 server on loopback, as GitHub answers: the authorization page
 * (approves at once as the account `signInAs` chose, or answers `access_denied` when told to
 * deny), the token endpoint (client secret in the form, PKCE S256, single-use codes, errors
 * as a 200 with `error` the way GitHub sends them), and the REST API's `/user` and
 * `/user/emails` under `/api`.
 */
export interface GithubEmail {
  email: string;
  primary: boolean;
  verified: boolean;
}

export interface GithubAccount {
  id: number;
  login: string;
  name?: string | null;
  /** The profile's public email: anything the person typed. */
  email?: string | null;
  emails: GithubEmail[];
}

export interface GithubPeer {
  url: string;
  apiUrl: string;
  clientId: string;
  clientSecret: string;
  signInAs(account: GithubAccount): void;
  /** The next authorization answers `access_denied`. */
  deny(): void;
  /** The API requests received, by path, with their Authorization header. */
  readonly apiRequests: { path: string; authorization: string | undefined }[];
  close(): Promise<void>;
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });

export async function startGithubPeer(): Promise<GithubPeer> {
  const clientId = 'Iv1.testclient';
  const clientSecret = 'github-client-secret-for-tests';
  let next: GithubAccount | null = null;
  let denyNext = false;
  const codes = new Map<string, { account: GithubAccount; challenge: string | null; redirectUri: string }>();
  const tokens = new Map<string, GithubAccount>();
  const apiRequests: GithubPeer['apiRequests'] = [];

  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
    res.end(JSON.stringify(body));
  };

  const server = http.createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      if (req.method === 'GET' && url.pathname === '/login/oauth/authorize') {
        const q = url.searchParams;
        if (q.get('client_id') !== clientId) return json(res, 404, { message: 'Not Found' });
        const back = new URL(q.get('redirect_uri') ?? '');
        if (denyNext || !next) {
          denyNext = false;
          back.searchParams.set('error', 'access_denied');
          back.searchParams.set('error_description', 'The user has denied your application access.');
        } else {
          const code = randomBytes(10).toString('hex');
          codes.set(code, { account: next, challenge: q.get('code_challenge_method') === 'S256' ? q.get('code_challenge') : null, redirectUri: back.href });
          back.searchParams.set('code', code);
        }
        const state = q.get('state');
        if (state !== null) back.searchParams.set('state', state);
        res.writeHead(302, { location: back.href });
        return res.end();
      }
      if (req.method === 'POST' && url.pathname === '/login/oauth/access_token') {
        const form = new URLSearchParams(await readBody(req));
        if (form.get('client_id') !== clientId || form.get('client_secret') !== clientSecret) {
          return json(res, 200, { error: 'incorrect_client_credentials', error_description: 'The client_id and/or client_secret passed are incorrect.' });
        }
        const code = form.get('code') ?? '';
        const grant = codes.get(code);
        codes.delete(code);
        const verifier = form.get('code_verifier') ?? '';
        if (!grant || !grant.challenge || createHash('sha256').update(verifier).digest('base64url') !== grant.challenge) {
          return json(res, 200, { error: 'bad_verification_code', error_description: 'The code passed is incorrect or expired.' });
        }
        const token = `gho_${randomBytes(18).toString('hex')}`;
        tokens.set(token, grant.account);
        return json(res, 200, { access_token: token, token_type: 'bearer', scope: 'read:user,user:email' });
      }
      if (req.method === 'GET' && url.pathname.startsWith('/api/')) {
        apiRequests.push({ path: url.pathname.slice(4), authorization: req.headers.authorization });
        const account = tokens.get((req.headers.authorization ?? '').replace(/^(Bearer|token) /i, ''));
        if (!account) return json(res, 401, { message: 'Bad credentials' });
        if (url.pathname === '/api/user')
          return json(res, 200, { id: account.id, login: account.login, name: account.name ?? null, email: account.email ?? null });
        if (url.pathname === '/api/user/emails')
          return json(
            res,
            200,
            account.emails.map((e) => ({ ...e, visibility: e.primary ? 'private' : null })),
          );
      }
      json(res, 404, { message: 'Not Found' });
    })().catch((err: Error) => {
      res.statusCode = 500;
      res.end(err.message);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    apiUrl: `${url}/api`,
    clientId,
    clientSecret,
    signInAs(account) {
      next = account;
    },
    deny() {
      denyNext = true;
    },
    apiRequests,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
