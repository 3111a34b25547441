// The operator CLI driven as a user would: `node --import tsx scripts/cli.ts …` on an embedded
// database in a fresh DATA_DIR, then the real server on that DATA_DIR to check that the
// tokens the CLI minted (and revoked) really work (or stop working).
//
// The tests run in order and build on each other (one DATA_DIR for the file).
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { cleanEnv, cleanUp, getJson, runCli, startServer, tempDir, type CliResult, type ServerProcess } from './support';

const SPAWN = 60_000;
// The first command creates the embedded database and migrates it: much slower than the rest.
const FIRST = 120_000;

const dataDir = tempDir('cp-e2e-cli-');
const encryptionKey = randomBytes(32).toString('hex');
const env = cleanEnv({ DATA_DIR: dataDir, ENCRYPTION_KEY: encryptionKey });
const cli = (...args: string[]) => runCli(args, env);

function json(result: CliResult): any {
  try {
    return JSON.parse(result.stdout);
  } catch {
    throw new Error(`Not JSON (exit ${result.code}):\nstdout: ${result.stdout}\nstderr: ${result.stderr}`);
  }
}

/** A refusal the operator can act on: exit 2, one plain message on stderr, no stack trace, nothing on stdout. */
function expectRefusal(result: CliResult, message: RegExp): void {
  expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 2, stderr: expect.stringMatching(message) });
  expect(result.stderr).not.toMatch(/\n\s+at /);
  expect(result.stdout).toBe('');
}

// What the tests learn as they go.
let boot: { organization_id: string; user_id: string; api_token: string };
let org: { organization_id: string; user_id: string };
let viewToken: { token_id: string; api_token: string };
let revokedToken: { token_id: string; api_token: string };
let server: ServerProcess | null = null;

afterAll(async () => {
  await cleanUp();
  expect(existsSync(dataDir)).toBe(false);
}, 30_000);

describe('operator CLI', () => {
  test(
    'help exits 0 and lists the commands',
    async () => {
      const result = await cli('help');
      expect(result.code).toBe(0);
      for (const command of ['bootstrap', 'org create', 'token create', 'token revoke']) expect(result.stdout).toContain(command);
      expect(result.stderr).toBe('');
      // --help and no command at all show the same text.
      expect((await cli('--help')).stdout).toBe(result.stdout);
    },
    SPAWN,
  );

  test(
    'bootstrap --json creates an organization, its owner and a token, and saves them to bootstrap.json (0600)',
    async () => {
      const result = await runCli(['bootstrap', '--json', '--base-url', 'https://mcp.acme.example'], env, FIRST);
      expect(result.code).toBe(0);
      const out = json(result);
      expect(out).toEqual({
        created: true,
        base_url: 'https://mcp.acme.example',
        organization_id: expect.stringMatching(/^org_[0-9a-z]{26}$/),
        user_id: expect.stringMatching(/^usr_[0-9a-z]{26}$/),
        api_token: expect.stringMatching(/^cpt_\S+$/),
        api_token_expires_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
      });
      boot = out;

      const file = join(dataDir, 'bootstrap.json');
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({
        base_url: out.base_url,
        organization_id: out.organization_id,
        user_id: out.user_id,
        api_token: out.api_token,
        api_token_expires_at: out.api_token_expires_at,
      });
    },
    FIRST,
  );

  test(
    'a second bootstrap --json is idempotent: created false, the same ids, no token',
    async () => {
      const before = readFileSync(join(dataDir, 'bootstrap.json'), 'utf8');
      const result = await cli('bootstrap', '--json');
      expect(result.code).toBe(0);
      expect(json(result)).toEqual({
        created: false,
        base_url: expect.any(String),
        organization_id: boot.organization_id,
        user_id: boot.user_id,
        api_token: null,
        api_token_expires_at: null,
      });
      // The saved token is not overwritten by the second run.
      expect(readFileSync(join(dataDir, 'bootstrap.json'), 'utf8')).toBe(before);
    },
    SPAWN,
  );

  test(
    'org create --name --owner-email --json creates a further organization and its owner',
    async () => {
      const result = await cli('org', 'create', '--name', 'Acme', '--owner-email', 'a@example.com', '--json');
      expect(result.code).toBe(0);
      org = json(result);
      expect(org).toEqual({
        organization_id: expect.stringMatching(/^org_[0-9a-z]{26}$/),
        user_id: expect.stringMatching(/^usr_[0-9a-z]{26}$/),
      });
      expect(org.organization_id).not.toBe(boot.organization_id);
      expect(org.user_id).not.toBe(boot.user_id);
    },
    SPAWN,
  );

  test(
    'token create --org --user EMAIL --permissions notification:view --json prints a cpt_ token once',
    async () => {
      const result = await cli('token', 'create', '--org', org.organization_id, '--user', 'a@example.com', '--permissions', 'notification:view', '--json');
      expect(result.code).toBe(0);
      const out = json(result);
      expect(out).toEqual({
        token_id: expect.stringMatching(/^tok_[0-9a-z]{26}$/),
        api_token: expect.stringMatching(/^cpt_\S+$/),
        organization_id: org.organization_id,
        user_id: org.user_id,
        permissions: ['notification:view'],
        expires_at: null,
      });
      viewToken = out;
    },
    SPAWN,
  );

  test(
    'token create with an unknown permission exits 2 and names it',
    async () => {
      const result = await cli(
        'token',
        'create',
        '--org',
        org.organization_id,
        '--user',
        'a@example.com',
        '--permissions',
        'notification:view,notification:fly',
        '--json',
      );
      expectRefusal(result, /Unknown permission\(s\): notification:fly\./);
    },
    SPAWN,
  );

  test(
    'token create for a user who is not a member of the organization exits 2',
    async () => {
      // The bootstrap owner exists, but in another organization; an unknown email is refused the same way.
      expectRefusal(
        await cli('token', 'create', '--org', org.organization_id, '--user', boot.user_id, '--json'),
        new RegExp(`${boot.user_id} is not an active member of ${org.organization_id}`),
      );
      expectRefusal(await cli('token', 'create', '--org', org.organization_id, '--user', 'nobody@example.com'), /nobody@example\.com is not an active member/);
    },
    2 * SPAWN,
  );

  test(
    'token revoke revokes a token; revoking it again exits 2',
    async () => {
      const created = await cli(
        'token',
        'create',
        '--org',
        org.organization_id,
        '--user',
        'a@example.com',
        '--permissions',
        'all',
        '--name',
        'to revoke',
        '--json',
      );
      expect(created.code).toBe(0);
      revokedToken = json(created);

      const first = await cli('token', 'revoke', revokedToken.token_id, '--json');
      expect(first.code).toBe(0);
      expect(json(first)).toEqual({ token_id: revokedToken.token_id, organization_id: org.organization_id });

      expectRefusal(await cli('token', 'revoke', revokedToken.token_id), new RegExp(`No active API token ${revokedToken.token_id}`));
    },
    3 * SPAWN,
  );

  test(
    'oauth-keys rotate retires the MCP OAuth signing keys (none yet: the first token makes one)',
    async () => {
      const result = await cli('oauth-keys', 'rotate', '--json');
      expect(result.code).toBe(0);
      expect(json(result)).toEqual({ retired: [] });
      expect((await cli('oauth-keys', 'rotate')).stdout).toContain('No key was signing yet');
    },
    2 * SPAWN,
  );

  test(
    'an unknown command exits 2 and points to help',
    async () => {
      expectRefusal(await cli('frobnicate'), /Unknown command "frobnicate"\. See: npm run cli -- help/);
      expectRefusal(await cli('token', 'rotate'), /Unknown command "token rotate"/);
    },
    2 * SPAWN,
  );

  test(
    'a missing required flag exits 2 and names the flag',
    async () => {
      expectRefusal(await cli('org', 'create', '--owner-email', 'b@example.com'), /--name is required/);
      expectRefusal(await cli('token', 'create', '--user', 'a@example.com'), /--org is required/);
      expectRefusal(await cli('token', 'revoke'), /Name the token/);
    },
    3 * SPAWN,
  );

  test(
    'an unknown option exits 2',
    async () => {
      expectRefusal(await cli('bootstrap', '--emial', 'x@example.com'), /Unknown option '--emial'/);
    },
    SPAWN,
  );

  test(
    'a flag without its value exits 2',
    async () => {
      expectRefusal(await cli('org', 'create', '--name'), /--name/);
    },
    SPAWN,
  );

  test(
    'an unknown command is refused before the database is opened',
    async () => {
      const fresh = tempDir('cp-e2e-cli-unopened-');
      const result = await runCli(['frobnicate'], cleanEnv({ DATA_DIR: fresh, ENCRYPTION_KEY: encryptionKey }));
      expectRefusal(result, /Unknown command/);
      expect(existsSync(join(fresh, 'pgdata'))).toBe(false);
    },
    SPAWN,
  );

  describe('the server on the same DATA_DIR', () => {
    test(
      'starts without a second bootstrap; while it runs the CLI refuses the locked database',
      async () => {
        server = await startServer({ DATA_DIR: dataDir, ENCRYPTION_KEY: encryptionKey });
        await server.waitUntilHealthy();
        expect(server.output().stderr).not.toContain('First start');

        expectRefusal(await cli('bootstrap', '--json'), new RegExp(`in use by process ${server.child.pid}`));
        // The refused command must not have taken the lock away from the server.
        expect(readFileSync(join(dataDir, 'pgdata.lock'), 'utf8').trim()).toBe(String(server.child.pid));
      },
      FIRST,
    );

    test(
      'GET /user/me: 200 with the CLI tokens, 401 with the revoked one',
      async () => {
        const me = await getJson(`${server!.baseUrl}/user/me`, viewToken.api_token);
        expect(me.status).toBe(200);
        expect(me.body.id).toBe(org.user_id);
        expect(me.body.email).toBe('a@example.com');
        expect(me.body.credential).toMatchObject({
          type: 'api_token',
          id: viewToken.token_id,
          organization_id: org.organization_id,
          permissions: ['notification:view'],
        });
        expect(me.body.organizations.map((o: any) => o.organization.id)).toEqual([org.organization_id]);
        expect(me.body.organizations[0].permissions).toEqual(['notification:view']);

        const owner = await getJson(`${server!.baseUrl}/user/me`, boot.api_token);
        expect(owner.status).toBe(200);
        expect(owner.body.id).toBe(boot.user_id);
        expect(owner.body.organizations.map((o: any) => o.organization.id)).toEqual([boot.organization_id]);

        const revoked = await getJson(`${server!.baseUrl}/user/me`, revokedToken.api_token);
        expect(revoked.status).toBe(401);
        expect(revoked.body.code).toBe('invalid_token');
      },
      SPAWN,
    );

    test(
      'SIGTERM stops it cleanly (exit 0) and releases the lock',
      async () => {
        const stopped = await server!.stop();
        expect(stopped).toMatchObject({ code: 0, signal: null });
        expect(existsSync(join(dataDir, 'pgdata.lock'))).toBe(false);
        // The CLI can open the database again.
        const again = await cli('bootstrap', '--json');
        expect(again.code).toBe(0);
        expect(json(again).created).toBe(false);
      },
      SPAWN,
    );
  });
});
