// The production configuration from a fresh checkout, as an operator following the README
// does it: `NODE_ENV=production make build` (npm leaves devDependencies out under
// NODE_ENV=production, and the build needs TypeScript), then the built server with
// NODE_ENV=production and its required ENCRYPTION_KEY.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { cleanEnv, cleanUp, getJson, ROOT, startServer, tempDir } from './support';

afterAll(() => cleanUp(), 30_000);

/** The files git would hand a fresh clone (tracked, and new ones not ignored), without node_modules or builds. */
function checkout(): string {
  const target = tempDir('cp-e2e-checkout-');
  const listed = spawnSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: ROOT, encoding: 'utf8' });
  for (const file of listed.stdout.split('\0').filter(Boolean)) {
    mkdirSync(dirname(join(target, file)), { recursive: true });
    try {
      copyFileSync(join(ROOT, file), join(target, file));
    } catch (err) {
      // A file deleted in the working tree but still tracked: a fresh clone of the change would not have it either.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return target;
}

it('builds and starts with NODE_ENV=production from a fresh checkout', async () => {
  const root = checkout();
  // stdin ignored: on a socket (Node's pipes are socket pairs) bash takes itself for a remote shell and reads bashrc.
  const build = spawnSync('make', ['build'], {
    cwd: root,
    env: cleanEnv({ NODE_ENV: 'production' }),
    encoding: 'utf8',
    timeout: 540_000,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  expect({ status: build.status, output: build.status === 0 ? '' : `${build.stdout}\n${build.stderr}`.slice(-3000) }).toEqual({ status: 0, output: '' });

  const server = await startServer({ NODE_ENV: 'production', ENCRYPTION_KEY: randomBytes(32).toString('hex'), DATA_DIR: tempDir('cp-e2e-prod-') }, { root });
  await server.waitUntilHealthy(60_000);
  expect((await getJson(`${server.baseUrl}/health`, null)).body).toEqual({ ok: true, service: 'mcp-control-plane' });
  // In production nothing is bootstrapped by whichever replica starts first: the operator does it.
  expect(server.output().stderr).not.toContain('First start');
  expect((await server.stop()).code).toBe(0);
}, 600_000);
