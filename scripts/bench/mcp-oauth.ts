// `npx tsx scripts/bench/mcp-oauth.ts`: what an OAuth access token costs on the MCP endpoint
// against the MCP server's own token, and what a refresh costs, through the app on loopback
// (DATABASE_URL, else the embedded database). One request at a time, p50/p90/p99 over
// BENCH_COUNT runs (default 200), and the ratio of the two tokens' p50 from the same run:
//
//   ping, server token   POST /mcp/{id} `ping` with `mcpt_…` (remembered by the credential cache)
//   ping, OAuth token    the same with an access token from /oauth/token (JWT verified, its jti
//                        and grant looked up on every request: revocation holds at once)
//   refresh              POST /oauth/token grant_type=refresh_token (rotation, audit entry)
import { createHash, randomBytes } from 'node:crypto';
import { measure, startBenchApp } from './support';

const REDIRECT = 'http://127.0.0.1:33418/callback';

async function main(): Promise<void> {
  const app = await startBenchApp();
  try {
    const { base, factories } = app;
    const { ownerId, orgId, token } = await factories.org();
    const session = await factories.session(ownerId);
    const api = (path: string, init: RequestInit = {}) =>
      fetch(`${base}${path}`, {
        ...init,
        headers: { authorization: `Bearer ${token}`, 'x-organization-id': orgId, 'content-type': 'application/json', ...init.headers },
      });
    const minted = (await (await api('/user-toolbox/utbx_dyn_all/mcp', { method: 'POST', body: JSON.stringify({ name: 'bench' }) })).json()) as {
      mcp_server: { id: string };
      token: string;
    };
    const resource = `${base}/mcp/${minted.mcp_server.id}`;
    const client = (await (
      await fetch(`${base}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' }),
      })
    ).json()) as { client_id: string };
    const verifier = randomBytes(32).toString('base64url');
    const query = new URLSearchParams({
      response_type: 'code',
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
      resource,
    });
    const cookie = `__Host-cp_session=${session}`;
    const consent = new URL((await fetch(`${base}/oauth/authorize?${query}`, { headers: { cookie }, redirect: 'manual' })).headers.get('location')!);
    const decided = await fetch(`${base}/oauth/consent/decision`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, origin: base, 'sec-fetch-site': 'same-origin', 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ request: consent.searchParams.get('request')!, decision: 'approve' }),
    });
    const code = new URL(decided.headers.get('location')!).searchParams.get('code')!;
    const form = (values: Record<string, string>) => ({
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(values),
    });
    const issued = (await (
      await fetch(
        `${base}/oauth/token`,
        form({ grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: REDIRECT, client_id: client.client_id }),
      )
    ).json()) as {
      access_token: string;
      refresh_token: string;
    };

    const ping = (bearer: string) => async () => {
      const res = await fetch(resource, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${bearer}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-06-18',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
      if (res.status !== 200) throw new Error(`ping answered ${res.status}`);
      await res.arrayBuffer();
    };
    const serverToken = await measure(ping(minted.token));
    const oauthToken = await measure(ping(issued.access_token));
    let refreshToken = issued.refresh_token;
    const refresh = await measure(async () => {
      const res = await fetch(`${base}/oauth/token`, form({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: client.client_id }));
      const body = (await res.json()) as { refresh_token: string };
      if (res.status !== 200) throw new Error(`refresh answered ${res.status}`);
      refreshToken = body.refresh_token;
    });
    const row = (name: string, l: { p50: number; p90: number; p99: number }) =>
      `${name.padEnd(20)} p50 ${l.p50.toFixed(2)} ms  p90 ${l.p90.toFixed(2)} ms  p99 ${l.p99.toFixed(2)} ms`;
    console.log(`database: ${process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded'}`);
    console.log(row('ping, server token', serverToken));
    console.log(row('ping, OAuth token', oauthToken));
    console.log(row('refresh', refresh));
    console.log(`OAuth token / server token (p50): ${(oauthToken.p50 / serverToken.p50).toFixed(2)}`);
  } finally {
    await app.close();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
