// SIGTERM while a request is in flight on a kept-alive connection (what a load balancer holds to
// each replica): the request completes, and the process exits once it is done rather than when
// the shutdown grace or the connection's keep-alive timeout (both ten minutes here) run out.
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanEnv, cleanUp, freePort, startServer, tempDir, type ServerProcess } from './support';

let server: ServerProcess;
let token: string;
let orgId: string;

beforeAll(async () => {
  const dataDir = tempDir('cp-graceful-');
  server = await startServer(
    cleanEnv({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', SHUTDOWN_GRACE_MS: '600000', KEEP_ALIVE_TIMEOUT_MS: '600000', OUTBOX_POLL_MS: '0' }),
  );
  await server.waitUntilHealthy(90_000);
  const boot = JSON.parse(readFileSync(join(dataDir, 'bootstrap.json'), 'utf8')) as { api_token: string; organization_id: string };
  token = boot.api_token;
  orgId = boot.organization_id;
}, 120_000);

afterAll(async () => {
  await server?.stop();
  await cleanUp();
});

test('a request in flight at SIGTERM completes on its kept-alive connection, and the process exits without waiting for that connection', async () => {
  const agent = new http.Agent({ keepAlive: true });
  const body = JSON.stringify({ name: 'Written during shutdown', permissions: ['connector:view'] });
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request(
      `${server.baseUrl}/role`,
      {
        method: 'POST',
        agent,
        headers: {
          authorization: `Bearer ${token}`,
          'x-organization-id': orgId,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    // Half the body now: the server holds the request until the rest arrives, after SIGTERM.
    req.write(body.slice(0, 10));
    setTimeout(() => {
      server.child.kill('SIGTERM');
      setTimeout(() => req.end(body.slice(10)), 500);
    }, 500);
  });
  const done = await answer;
  expect(done.status).toBe(201);
  expect(JSON.parse(done.body)).toMatchObject({ name: 'Written during shutdown' });
  // The agent would keep the connection for the next request; the server's exit does not wait for it.
  expect(await server.exited).toBe(0);
  agent.destroy();
}, 60_000);

describe('with readiness served (METRICS_PORT)', () => {
  let ready: ServerProcess;
  let metricsUrl: string;

  beforeAll(async () => {
    const metricsPort = await freePort();
    metricsUrl = `http://127.0.0.1:${metricsPort}`;
    ready = await startServer(
      cleanEnv({
        DATA_DIR: tempDir('cp-graceful-ready-'),
        LOG_LEVEL: 'warn',
        METRICS_PORT: String(metricsPort),
        SHUTDOWN_DELAY_MS: '3000',
        OUTBOX_POLL_MS: '0',
      }),
    );
    await ready.waitUntilHealthy(90_000);
  }, 120_000);

  afterAll(() => ready?.stop());

  test('SIGTERM turns readiness 503 first and goes on serving for SHUTDOWN_DELAY_MS, so a balancer stops routing here before anything is refused', async () => {
    expect((await fetch(`${metricsUrl}/ready`)).status).toBe(200);
    ready.child.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 500));
    const readiness = await fetch(`${metricsUrl}/ready`);
    expect(readiness.status).toBe(503);
    expect(await readiness.json()).toEqual({ status: 'draining' });
    // The API still answers as usual meanwhile.
    expect((await fetch(`${ready.baseUrl}/health`)).status).toBe(200);
    expect((await fetch(`${ready.baseUrl}/user/me`)).status).toBe(401);
    expect(await ready.exited).toBe(0);
  }, 60_000);
});
