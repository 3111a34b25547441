import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { startTestApp, type TestApp } from '../support/app';
import { connectMember, mintMcpServer, type MintedServer } from '../support/mcp';
import { consentInBrowserSteps, loopbackCertificate, MemoryOAuthProvider, specCheckedFetch } from '../support/oauth-clients';
import { freePort, startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';

/*
 * Real MCP clients against the OAuth authorization server, each given nothing but a minted
 * MCP server's URL: the MCP TypeScript SDK's own OAuth client (dynamic registration, and a
 * Client ID Metadata Document), and mcp-remote as Claude Desktop runs it. The person signs in
 * (a session) and answers the consent page; the client lists and calls tools, refreshes, and
 * is refused once its access is revoked.
 */

const KEY = 'key-ada-Oa4Rt8';
const upstream = useUpstream(() => startApiKeyUpstream({ keys: { [KEY]: 'ada' } }));

let t: TestApp;
let orgId: string;
let adaId: string;
let adaToken: string;

beforeAll(async () => {
  t = await startTestApp();
  const org = await t.factories.org();
  orgId = org.orgId;
  adaId = await t.factories.member(orgId);
  adaToken = await t.factories.token(orgId, adaId);
  const crm = await customConnector(t, orgId, {
    slug: 'crm',
    name: 'Acme CRM',
    mcp_url: `${new URL(upstream.peer.url).origin}/mcp`,
    auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
  });
  await connectMember(t, { token: adaToken, org: orgId }, crm, KEY);
}, 60_000);
afterAll(() => t.close());
afterEach(() => expect(t.specProblems).toEqual([]));

const mint = (name: string): Promise<MintedServer> => mintMcpServer(t, { token: adaToken, org: orgId }, { name });
const endpoint = (server: MintedServer) => new URL(`${t.url}/mcp/${server.id}`);

/** The SDK's client on a new transport with the provider (the SDK's way after an authorization: a new transport). */
async function connected(server: MintedServer, provider: MemoryOAuthProvider): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(endpoint(server), { authProvider: provider, fetch: specCheckedFetch(t) });
  const client = new Client({ name: 'oauth-test-client', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  return client;
}

/**
 * The first connection: refused with 401, the SDK discovers the authorization server, gets a
 * client id (registration or its metadata document) and sends the person to authorize; the
 * person consents; the code goes back through `finishAuth`. Returns where the consent sent
 * the browser, and the consent page.
 */
async function authorizeFirstTime(server: MintedServer, provider: MemoryOAuthProvider, session: string) {
  const transport = new StreamableHTTPClientTransport(endpoint(server), { authProvider: provider, fetch: specCheckedFetch(t) });
  const client = new Client({ name: 'oauth-test-client', version: '1.0.0' }, { capabilities: {} });
  await expect(client.connect(transport)).rejects.toBeInstanceOf(UnauthorizedError);
  const consent = await consentInBrowserSteps(t, provider.lastAuthorizationUrl, session);
  const { location } = consent;
  expect(`${location.origin}${location.pathname}`).toBe(provider.redirectUrl);
  expect(location.searchParams.get('state')).toBe(provider.states.at(-1));
  expect(location.searchParams.get('iss')).toBe(t.url);
  const code = location.searchParams.get('code');
  expect(code).toMatch(/^oacd_/);
  await transport.finishAuth(code as string);
  await client.close();
  return consent;
}

const grantOf = (clientId: string) =>
  t.db
    .selectFrom('oauth_grants')
    .selectAll()
    .where('client_id', '=', clientId)
    .where('user_id', '=', adaId)
    .orderBy('created_at', 'desc')
    .executeTakeFirstOrThrow();

/** Lets the client's current access token run out, as an hour would (the token itself cannot be backdated: it is signed). */
async function expireAccessTokens(grantId: string): Promise<void> {
  await t.db
    .updateTable('oauth_access_tokens')
    .set({ expires_at: new Date(Date.now() - 1000) })
    .where('grant_id', '=', grantId)
    .execute();
}

async function whoami(client: Client): Promise<CallToolResult> {
  return (await client.callTool({ name: 'crm__whoami', arguments: {} })) as CallToolResult;
}

/** The MCP endpoint's answer to a bare request with this access token. */
async function endpointStatus(server: MintedServer, accessToken: string) {
  const res = await fetch(endpoint(server), {
    method: 'POST',
    headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
  });
  await res.body?.cancel();
  return { status: res.status, challenge: res.headers.get('www-authenticate') };
}

describe('the MCP SDK client with dynamic registration', () => {
  it('connects given only the URL: 401, discovery, registration, consent, tools; refreshes when the token runs out; is refused once revoked', async () => {
    const server = await mint('SDK registered');
    const provider = new MemoryOAuthProvider('http://127.0.0.1:48213/callback', { clientName: 'Ada’s SDK client' });
    const session = await t.factories.session(adaId);

    const { page } = await authorizeFirstTime(server, provider, session);
    // Registered by RFC 7591: a public client with an oac_ id, bound to this issuer.
    expect(provider.information).toMatchObject({ client_id: expect.stringMatching(/^oac_/), token_endpoint_auth_method: 'none' });
    const clientId = provider.information!.client_id;
    expect(page).toContain('Ada’s SDK client');
    expect(page).toContain('127.0.0.1:48213');
    // The authorization asked for this server only, with PKCE S256 and the 401's scope.
    const asked = provider.lastAuthorizationUrl.searchParams;
    expect(Object.fromEntries(['resource', 'code_challenge_method', 'scope', 'client_id'].map((n) => [n, asked.get(n)]))).toEqual({
      resource: endpoint(server).href,
      code_challenge_method: 'S256',
      scope: 'mcp',
      client_id: clientId,
    });
    // A refresh token although the client never asked for offline_access.
    expect(provider.stored).toMatchObject({ token_type: expect.stringMatching(/^bearer$/i), refresh_token: expect.stringMatching(/^mcprt_/), scope: 'mcp' });
    const first = { ...provider.stored! };

    const client = await connected(server, provider);
    try {
      const names = (await client.listTools()).tools.map((tool) => tool.name);
      expect(names).toEqual(expect.arrayContaining(['crm__whoami', 'crm__echo']));
      expect((await whoami(client)).structuredContent).toMatchObject({ member: 'ada', credential: KEY });

      // The hour is up: the next call is refused, the SDK refreshes and calls again.
      const grant = await grantOf(clientId);
      await expireAccessTokens(grant.id);
      expect((await endpointStatus(server, first.access_token)).status).toBe(401);
      expect((await whoami(client)).structuredContent).toMatchObject({ member: 'ada' });
      expect(provider.stored!.access_token).not.toBe(first.access_token);
      // Rotated: a new refresh token replaced the one used.
      expect(provider.stored!.refresh_token).toMatch(/^mcprt_/);
      expect(provider.stored!.refresh_token).not.toBe(first.refresh_token);
      expect(provider.authorizationUrls).toHaveLength(1);
      expect((await t.factories.auditEntries(orgId, 'oauth_grant.refreshed')).some((e) => e.target_id === grant.id)).toBe(true);

      // The client gives the refresh token back (RFC 7009): the grant ends, and with it every token.
      const revoked = await t.call('POST', '/oauth/revoke', undefined, {
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        raw: new URLSearchParams({ token: provider.stored!.refresh_token!, token_type_hint: 'refresh_token', client_id: clientId }).toString(),
      });
      expect(revoked.status).toBe(200);
      const refused = await endpointStatus(server, provider.stored!.access_token);
      expect(refused.status).toBe(401);
      expect(refused.challenge).toContain('resource_metadata=');
      // The SDK cannot refresh either: it starts a new authorization and reports that it needs one.
      await expect(whoami(client)).rejects.toBeInstanceOf(UnauthorizedError);
      expect(provider.authorizationUrls).toHaveLength(2);
      expect((await grantOf(clientId)).revoked_at).not.toBeNull();
      expect((await t.factories.auditEntries(orgId, 'oauth_grant.revoked')).some((e) => e.target_id === grant.id)).toBe(true);
    } finally {
      await client.close();
    }
  });
});

describe('the MCP SDK client identified by a Client ID Metadata Document', () => {
  const certificate = loopbackCertificate();
  let untrust: () => void;
  let documents: Server;
  let documentUrl: string;
  let fetched = 0;
  const redirect = 'http://127.0.0.1:48214/callback';

  beforeAll(async () => {
    untrust = certificate.trust();
    // The client's own site, serving its metadata document (https: the SDK sends no other URL as a client id).
    documents = createServer({ key: certificate.key, cert: certificate.cert }, (req, res) => {
      if (req.url !== '/oauth/client.json') {
        res.writeHead(404).end();
        return;
      }
      fetched += 1;
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=600' });
      res.end(
        JSON.stringify({
          client_id: documentUrl,
          client_name: 'Metadata Document Client',
          client_uri: 'https://client.example/',
          redirect_uris: [redirect],
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
          token_endpoint_auth_method: 'none',
        }),
      );
    });
    await new Promise<void>((resolve) => documents.listen(0, '127.0.0.1', resolve));
    documentUrl = `https://127.0.0.1:${(documents.address() as AddressInfo).port}/oauth/client.json`;
  });
  afterAll(async () => {
    untrust?.();
    documents.closeAllConnections();
    await new Promise((resolve) => documents.close(resolve));
  });

  it('uses the document’s URL as its client id without registering, consents, calls tools, refreshes, and is refused once revoked', async () => {
    const server = await mint('SDK metadata document');
    const provider = new MemoryOAuthProvider(redirect, { clientMetadataUrl: documentUrl });
    const session = await t.factories.session(adaId);
    const registered = await t.db
      .selectFrom('oauth_clients')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('kind', '=', 'registered')
      .executeTakeFirstOrThrow();

    const { page } = await authorizeFirstTime(server, provider, session);
    expect(provider.information).toMatchObject({ client_id: documentUrl });
    expect(provider.lastAuthorizationUrl.searchParams.get('client_id')).toBe(documentUrl);
    // No registration happened: the server read the document instead (once; it may keep it ten minutes).
    const after = await t.db
      .selectFrom('oauth_clients')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('kind', '=', 'registered')
      .executeTakeFirstOrThrow();
    expect(Number(after.n)).toBe(Number(registered.n));
    expect(fetched).toBe(1);
    // The page names the client as its document does, and where that document lives.
    expect(page).toContain('Metadata Document Client');
    expect(page).toContain(documentUrl);
    expect(page).toContain('127.0.0.1:48214');
    expect(provider.stored).toMatchObject({ refresh_token: expect.stringMatching(/^mcprt_/) });
    const first = { ...provider.stored! };

    const client = await connected(server, provider);
    try {
      expect((await whoami(client)).structuredContent).toMatchObject({ member: 'ada', credential: KEY });

      // The client revokes its access token alone (RFC 7009): that token stops; the SDK refreshes and goes on.
      const revokedAccess = await t.call('POST', '/oauth/revoke', undefined, {
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        raw: new URLSearchParams({ token: first.access_token, token_type_hint: 'access_token', client_id: documentUrl }).toString(),
      });
      expect(revokedAccess.status).toBe(200);
      expect((await endpointStatus(server, first.access_token)).status).toBe(401);
      expect((await whoami(client)).structuredContent).toMatchObject({ member: 'ada' });
      expect(provider.stored!.access_token).not.toBe(first.access_token);
      expect(provider.stored!.refresh_token).not.toBe(first.refresh_token);
      // The hour runs out too: refreshed again.
      const grant = await grantOf(documentUrl);
      await expireAccessTokens(grant.id);
      const second = { ...provider.stored! };
      expect((await client.listTools()).tools.map((tool) => tool.name)).toContain('crm__whoami');
      expect(provider.stored!.refresh_token).not.toBe(second.refresh_token);
      expect(provider.authorizationUrls).toHaveLength(1);
      expect(fetched).toBe(1);

      // Then the refresh token: the grant ends.
      const revoked = await t.call('POST', '/oauth/revoke', undefined, {
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        raw: new URLSearchParams({ token: provider.stored!.refresh_token!, client_id: documentUrl }).toString(),
      });
      expect(revoked.status).toBe(200);
      expect((await endpointStatus(server, provider.stored!.access_token)).status).toBe(401);
      await expect(whoami(client)).rejects.toBeInstanceOf(UnauthorizedError);
      expect(provider.authorizationUrls).toHaveLength(2);
    } finally {
      await client.close();
    }
  });
});

/**
 * mcp-remote as Claude Desktop runs it (`npx mcp-remote <url>`, here with a fixed callback
 * port), in a home of its own (MCP_REMOTE_CONFIG_DIR) and with no way to open a browser: it
 * prints the authorization URL, which the test opens as the person, and its callback server
 * gets the code. Then the test is Claude Desktop: MCP over the process's stdio.
 */
class McpRemote {
  private stderr = '';
  private stdout = '';
  private readonly waiters = new Set<() => void>();
  readonly home = mkdtempSync(join(tmpdir(), 'mcp-remote-'));
  readonly child: ChildProcessWithoutNullStreams;

  constructor(url: string, callbackPort: number) {
    // Browser openers that fail at once, whatever this machine has installed.
    const bin = join(this.home, 'bin');
    mkdirSync(bin);
    for (const name of ['xdg-open', 'gio', 'x-www-browser', 'sensible-browser', 'www-browser']) {
      writeFileSync(join(bin, name), '#!/bin/sh\nexit 1\n');
      chmodSync(join(bin, name), 0o755);
    }
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      MCP_REMOTE_CONFIG_DIR: join(this.home, 'auth'),
      PATH: `${bin}:${process.env.PATH ?? ''}`,
      BROWSER: join(bin, 'x-www-browser'),
    };
    delete env.DISPLAY;
    delete env.WAYLAND_DISPLAY;
    delete env.NODE_OPTIONS;
    this.child = spawn(process.execPath, [require.resolve('mcp-remote/dist/proxy.js'), url, String(callbackPort)], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stderr.on('data', (chunk: Buffer) => this.took(() => (this.stderr += chunk.toString())));
    this.child.stdout.on('data', (chunk: Buffer) => this.took(() => (this.stdout += chunk.toString())));
    this.child.on('exit', () => this.took(() => undefined));
  }

  private took(append: () => void): void {
    append();
    for (const wake of this.waiters) wake();
  }

  /** Waits (at most `ms`) until `found` finds something in what the process wrote; throws with its output if not. */
  private async until<T>(found: () => T | null, what: string, ms = 20_000): Promise<T> {
    const deadline = Date.now() + ms;
    for (;;) {
      const value = found();
      if (value !== null) return value;
      if (this.child.exitCode !== null) throw new Error(`mcp-remote exited (${this.child.exitCode}) before ${what}:\n${this.stderr}`);
      if (Date.now() > deadline) throw new Error(`mcp-remote did not ${what} within ${ms} ms:\n${this.stderr}`);
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.waiters.delete(wake);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(wake, 250);
        this.waiters.add(wake);
      });
    }
  }

  authorizationUrl(): Promise<URL> {
    return this.until(() => {
      const match = /Please authorize this client by visiting:\s*(\S+)/.exec(this.stderr);
      return match ? new URL(match[1]!) : null;
    }, 'print an authorization URL');
  }

  proxying(): Promise<true> {
    return this.until(() => (this.stderr.includes('Proxy established successfully') ? true : null), 'connect to the MCP server');
  }

  /**
   * The browser arriving at the callback. mcp-remote may print the URL a moment before its
   * callback server listens (it starts it once the SDK asks for a sign-in): a refused
   * connection is tried again, as a person would reload, for at most 10 s.
   */
  async callback(location: URL): Promise<Response> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        return await fetch(location);
      } catch (err) {
        const refused = (err as { cause?: { code?: string } }).cause?.code === 'ECONNREFUSED';
        if (!refused || Date.now() > deadline)
          throw new Error(`The callback at ${location.origin} did not answer: ${String(err)}\n${this.stderr}`, { cause: err });
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }

  /** How many times it has asked the person to authorize. */
  authorizationsAsked(): number {
    return this.stderr.split('Please authorize this client by visiting:').length - 1;
  }

  asksToAuthorizeAgain(times: number): Promise<true> {
    return this.until(() => (this.authorizationsAsked() >= times ? true : null), 'ask to authorize again');
  }

  /** A file mcp-remote keeps for the server (`tokens.json`, `client_info.json`), as JSON. */
  stored(name: string): any {
    const find = (dir: string): string | null => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) {
          const found = find(path);
          if (found) return found;
        } else if (entry.name.endsWith(`_${name}`)) return path;
      }
      return null;
    };
    const file = find(join(this.home, 'auth'));
    if (!file) throw new Error(`mcp-remote keeps no ${name}.`);
    return JSON.parse(readFileSync(file, 'utf8'));
  }

  private nextId = 1;

  /** One JSON-RPC request over stdin, and its answer from stdout. */
  async request(method: string, params: Record<string, unknown> = {}): Promise<any> {
    const id = this.nextId++;
    this.child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, params })}\n`);
    return this.until(() => {
      for (const line of this.stdout.split('\n')) {
        if (line.trim() === '') continue;
        const message = JSON.parse(line) as { id?: number };
        if (message.id === id) return message;
      }
      return null;
    }, `answer ${method}`);
  }

  notify(method: string): void {
    this.child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', method })}\n`);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((resolve) => this.child.once('exit', resolve));
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.home, { recursive: true, force: true });
  }
}

describe('mcp-remote, as Claude Desktop runs it', () => {
  it('signs in through the printed URL, lists and calls tools over stdio, refreshes, and asks to sign in again once revoked', async () => {
    const server = await mint('Claude Desktop');
    const session = await t.factories.session(adaId);
    const callbackPort = await freePort();
    const remote = new McpRemote(endpoint(server).href, callbackPort);
    try {
      const authorizationUrl = await remote.authorizationUrl();
      expect(authorizationUrl.searchParams.get('resource')).toBe(endpoint(server).href);
      const { page, location } = await consentInBrowserSteps(t, authorizationUrl, session);
      expect(page).toContain('MCP CLI Proxy');
      expect(page).toContain(`localhost:${callbackPort}`);
      expect(`${location.origin}${location.pathname}`).toBe(`http://localhost:${callbackPort}/oauth/callback`);
      expect(location.searchParams.get('iss')).toBe(t.url);
      // The browser follows the redirect to mcp-remote's callback server.
      const callback = await remote.callback(location);
      expect(callback.status).toBe(200);
      await callback.body?.cancel();
      await remote.proxying();

      const initialized = await remote.request('initialize', {
        protocolVersion: '2025-06-18',
        capabilities: {},
        clientInfo: { name: 'claude-ai', version: '0.1.0' },
      });
      expect(initialized.result).toMatchObject({ serverInfo: { name: 'mcp-control-plane' } });
      remote.notify('notifications/initialized');
      const listed = await remote.request('tools/list');
      expect(listed.result.tools.map((tool: { name: string }) => tool.name)).toEqual(expect.arrayContaining(['crm__whoami', 'crm__echo']));
      const called = await remote.request('tools/call', { name: 'crm__echo', arguments: { text: 'hello from Claude Desktop' } });
      expect(called.result.isError).toBeFalsy();
      expect(JSON.stringify(called.result.content)).toContain('hello from Claude Desktop');
      const who = await remote.request('tools/call', { name: 'crm__whoami', arguments: {} });
      expect(who.result.structuredContent).toMatchObject({ member: 'ada', credential: KEY });
      // It registered itself by RFC 7591 and holds a refresh token.
      const grant = await t.db
        .selectFrom('oauth_grants as g')
        .innerJoin('oauth_clients as c', 'c.id', 'g.client_id')
        .select(['g.id', 'c.kind', 'g.revoked_at'])
        .where('g.mcp_server_id', '=', server.id)
        .executeTakeFirstOrThrow();
      expect(grant).toMatchObject({ kind: 'registered', revoked_at: null });
      const clientId: string = remote.stored('client_info.json').client_id;
      const first = remote.stored('tokens.json');
      expect(first.refresh_token).toMatch(/^mcprt_/);

      // The hour is up: mcp-remote refreshes on the refusal and the call goes through.
      await expireAccessTokens(grant.id);
      expect((await remote.request('tools/call', { name: 'crm__whoami', arguments: {} })).result.structuredContent).toMatchObject({ member: 'ada' });
      const second = remote.stored('tokens.json');
      expect(second.refresh_token).not.toBe(first.refresh_token);
      expect((await t.factories.auditEntries(orgId, 'oauth_grant.refreshed')).some((e) => e.target_id === grant.id)).toBe(true);
      expect(remote.authorizationsAsked()).toBe(1);

      // Its refresh token is revoked (RFC 7009): its access token stops, refreshing fails, and it asks the person again.
      const revoked = await t.call('POST', '/oauth/revoke', undefined, {
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        raw: new URLSearchParams({ token: second.refresh_token, client_id: clientId }).toString(),
      });
      expect(revoked.status).toBe(200);
      expect((await endpointStatus(server, second.access_token)).status).toBe(401);
      remote.child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 999, method: 'tools/call', params: { name: 'crm__whoami', arguments: {} } })}\n`);
      await remote.asksToAuthorizeAgain(2);
      expect((await t.db.selectFrom('oauth_grants').select('revoked_at').where('id', '=', grant.id).executeTakeFirstOrThrow()).revoked_at).not.toBeNull();
    } finally {
      await remote.stop();
    }
  }, 60_000);
});
