// The first start as `make start` does it: the server on an empty DATA_DIR (embedded
// database, no ENCRYPTION_KEY, default NODE_ENV), which bootstraps, prints what it created
// once and keeps working across a restart.
//
// The tests run in order and build on each other (one DATA_DIR for the file).
import { chmodSync, existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { cleanUp, getJson, startServer, tempDir, type ServerProcess } from './support';

const START = 120_000;

const dataDir = tempDir('cp-e2e-start-');
// As an operator might have made it: readable by everyone, until the server closes it.
chmodSync(dataDir, 0o755);
// What a user's shell gives `make start`: only DATA_DIR is chosen here (PORT and HOST by the helper).
const env = { DATA_DIR: dataDir };

let first: ServerProcess | null = null;
let printed: { baseUrl: string; organizationId: string; token: string };

type LogLine = { msg?: string; level?: number; [key: string]: unknown };

/** The pino lines (JSON) the server wrote to stdout (a line still being written is skipped). */
function logLines(stdout: string): LogLine[] {
  return stdout.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      return [JSON.parse(line) as LogLine];
    } catch {
      return [];
    }
  });
}

afterAll(async () => {
  await cleanUp();
  expect(existsSync(dataDir)).toBe(false);
}, 30_000);

describe('first start on an empty DATA_DIR', () => {
  test(
    'prints the bootstrap block (base URL, organization id, token) and answers /health',
    async () => {
      first = await startServer(env);
      await first.waitForStderr((out) => /API token:\s+cpt_\S+/.test(out), START);
      await first.waitUntilHealthy();
      // The log line is written after the socket listens, so /health can answer before it is out.
      await first.waitForStdout((out) => out.includes('"msg":"listening"'), START);

      // The block is for the person at the terminal (stderr); stdout is the structured log stream.
      const { stdout, stderr } = first.output();
      expect(stderr).toContain('First start: created an organization, its owner and an API token with every permission.');
      const baseUrl = /base URL:\s+(\S+)/.exec(stderr)?.[1];
      const organizationId = /organization id:\s+(org_[0-9a-z]{26})\b/.exec(stderr)?.[1];
      const token = /API token:\s+(cpt_\S+)/.exec(stderr)?.[1];
      const expires = Date.parse(/expires:\s+(\S+)/.exec(stderr)?.[1] ?? '');
      // BOOTSTRAP_TOKEN_DAYS is 7 by default: a token for setting up, not for running.
      expect(Math.round((expires - Date.now()) / 86_400_000)).toBe(7);
      expect({ baseUrl, organizationId, token }).toEqual({
        baseUrl: first.baseUrl,
        organizationId: expect.any(String),
        token: expect.any(String),
      });
      printed = { baseUrl: baseUrl!, organizationId: organizationId!, token: token! };
      // The try-line is a working command.
      expect(stderr).toContain(`curl -H "Authorization: Bearer ${token}" ${first.baseUrl}/user/me`);
      // The token never reaches the log stream.
      expect(stdout).not.toContain(token);
      expect(logLines(stdout).map((l) => l.msg)).toEqual(expect.arrayContaining(['database ready', 'listening']));
    },
    START,
  );

  test('DATA_DIR/bootstrap.json (0600) holds what was printed; encryption.key (0600) was generated', () => {
    const file = join(dataDir, 'bootstrap.json');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({
      base_url: printed.baseUrl,
      organization_id: printed.organizationId,
      user_id: expect.stringMatching(/^usr_[0-9a-z]{26}$/),
      api_token: printed.token,
      api_token_expires_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
    });

    const key = join(dataDir, 'encryption.key');
    expect(statSync(key).mode & 0o777).toBe(0o600);
    expect(readFileSync(key, 'utf8')).toMatch(/^[0-9a-f]{64}\n$/);
  });

  test('keeps DATA_DIR to its owner: the folder 0700, every file in it (the database included) no more than 0600', () => {
    expect(statSync(dataDir).mode & 0o777).toBe(0o700);
    const open: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) {
          if ((statSync(path).mode & 0o077) !== 0) open.push(path);
          walk(path);
        } else if ((statSync(path).mode & 0o077) !== 0) open.push(path);
      }
    };
    walk(dataDir);
    expect(open).toEqual([]);
  });

  test('GET /user/me with the printed token: 200 and lists that organization', async () => {
    const me = await getJson(`${printed.baseUrl}/user/me`, printed.token);
    expect(me.status).toBe(200);
    expect(me.body.email).toBe('owner@example.com');
    expect(me.body.organizations).toHaveLength(1);
    expect(me.body.organizations[0].organization.id).toBe(printed.organizationId);
    expect(me.body.credential).toMatchObject({ type: 'api_token', organization_id: printed.organizationId });

    const anonymous = await getJson(`${printed.baseUrl}/user/me`, null);
    expect(anonymous.status).toBe(401);
  }, 30_000);

  test('SIGTERM: exits 0 within a few seconds and logs shutting down', async () => {
    const stopped = await first!.stop();
    expect(stopped).toMatchObject({ code: 0, signal: null });
    expect(stopped.ms).toBeLessThan(5_000);
    const messages = logLines(first!.output().stdout).map((l) => l.msg ?? '');
    expect(messages.some((m) => m.startsWith('shutting down'))).toBe(true);
    expect(messages).toContain('stopped');
    expect(existsSync(join(dataDir, 'pgdata.lock'))).toBe(false);
  }, 30_000);
});

describe('restart on the same DATA_DIR', () => {
  let second: ServerProcess | null = null;

  test(
    'no second bootstrap block; the printed token still works',
    async () => {
      const keyBefore = readFileSync(join(dataDir, 'encryption.key'), 'utf8');
      const bootstrapBefore = readFileSync(join(dataDir, 'bootstrap.json'), 'utf8');
      second = await startServer(env);
      await second.waitUntilHealthy(START);
      await second.waitForStdout((out) => logLines(out).some((l) => l.msg === 'listening'));

      const { stdout, stderr } = second.output();
      for (const output of [stdout, stderr]) {
        expect(output).not.toContain('First start');
        expect(output).not.toContain('API token:');
        expect(output).not.toContain(printed.token);
      }
      // Nothing regenerated.
      expect(readFileSync(join(dataDir, 'encryption.key'), 'utf8')).toBe(keyBefore);
      expect(readFileSync(join(dataDir, 'bootstrap.json'), 'utf8')).toBe(bootstrapBefore);

      const me = await getJson(`${second.baseUrl}/user/me`, printed.token);
      expect(me.status).toBe(200);
      expect(me.body.organizations.map((o: any) => o.organization.id)).toEqual([printed.organizationId]);
    },
    START,
  );

  test('SIGTERM: exits 0 within a few seconds and logs shutting down', async () => {
    const stopped = await second!.stop();
    expect(stopped).toMatchObject({ code: 0, signal: null });
    expect(stopped.ms).toBeLessThan(5_000);
    const messages = logLines(second!.output().stdout).map((l) => l.msg ?? '');
    expect(messages.some((m) => m.startsWith('shutting down'))).toBe(true);
    expect(second!.output().stderr).toBe('');
  }, 30_000);
});
