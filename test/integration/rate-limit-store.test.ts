import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pino from 'pino';
import { startTestApp, type TestApp } from '../support/app';
import { freePort } from '../support/upstream-mcp';

// Counters in PostgreSQL or Redis are what several replicas share; the embedded database has no pool.
const onServer = process.env.TEST_DATABASE_URL ? describe : describe.skip;
const REDIS_URL = 'redis://127.0.0.1:6379';

/** A client address of the test's own (the apps trust one proxy hop), so runs do not share failure budgets. */
const address = () => `198.18.${randomBytes(1)[0]}.${randomBytes(1)[0]}`;
const junkToken = () => `cpt_${randomBytes(32).toString('base64url')}`;

onServer('rate limits kept in PostgreSQL', () => {
  let t: TestApp;
  beforeAll(async () => {
    // DATABASE_URL only satisfies the setting's check; the test app uses its own fresh database's pool.
    t = await startTestApp({
      env: { RATE_LIMIT_STORE: 'postgres', DATABASE_URL: 'postgres://unused', RATE_LIMIT_REQUESTS: '2', RATE_LIMIT_AUTH_FAILURES: '2', TRUST_PROXY: '1' },
    });
  });
  afterAll(() => t.close());

  it('counts per credential in the rate_limits table and answers 429 past the limit', async () => {
    const { token } = await t.factories.org();
    const client = t.as({ token });
    expect((await client.get('/user/me')).status).toBe(200);
    expect((await client.get('/user/me')).status).toBe(200);
    const limited = await client.get('/user/me');
    expect(limited.status).toBe(429);
    expect(limited.body.code).toBe('rate_limited');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const rows = await t.db.selectFrom('rate_limits').selectAll().where('key', 'like', 'caller:%').execute();
    expect(rows).toEqual([expect.objectContaining({ points: 3 })]);
  });

  it('keeps the failed authentications there too', async () => {
    const headers = { 'x-forwarded-for': address() };
    const statuses = [];
    for (let i = 0; i < 3; i += 1) statuses.push((await t.call('GET', '/user/me', undefined, { token: junkToken(), headers })).status);
    expect(statuses).toEqual([401, 401, 429]);
    expect(await t.db.selectFrom('rate_limits').select('key').where('key', '=', `auth-failures:${headers['x-forwarded-for']}`).execute()).toHaveLength(1);
  });
});

/** Redis runs on this machine's loopback; where it does not, there is nothing to share counters through. */
async function redisAnswers(): Promise<boolean> {
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 1000 });
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

describe('rate limits kept in Redis (REDIS_URL)', () => {
  let a: TestApp;
  let b: TestApp;
  let available = false;
  beforeAll(async () => {
    available = await redisAnswers();
    if (!available) return;
    const env = { REDIS_URL, RATE_LIMIT_REQUESTS: '4', RATE_LIMIT_AUTH_FAILURES: '3', TRUST_PROXY: '1' };
    a = await startTestApp({ env });
    b = await startTestApp({ env });
    // Two apps, each with its own database, take longer than one hook's default on a busy machine.
  }, 90_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
  });

  it('shares the failed-authentication budget of an address between two servers', async () => {
    if (!available) return console.warn(`No Redis at ${REDIS_URL}; nothing to test.`);
    const headers = { 'x-forwarded-for': address() };
    const failures = [];
    for (const app of [a, b, a, b]) failures.push((await app.call('GET', '/user/me', undefined, { token: junkToken(), headers })).status);
    expect(failures).toEqual([401, 401, 401, 429]);
  });

  it('counts per credential in Redis', async () => {
    if (!available) return console.warn(`No Redis at ${REDIS_URL}; nothing to test.`);
    const { token } = await a.factories.org();
    const statuses = [];
    for (let i = 0; i < 5; i += 1) statuses.push((await a.as({ token }).get('/user/me')).status);
    expect(statuses).toEqual([200, 200, 200, 200, 429]);
    const tokenId = await a.factories.tokenId(token);
    const redis = new Redis(REDIS_URL);
    try {
      expect(Number(await redis.get(`caller:api_token:${tokenId}`))).toBe(5);
    } finally {
      redis.disconnect();
    }
  });
});

/** A redis-server of the test's own on a free loopback port, stopped and started by the test (never the machine's). */
async function ownRedis(port: number) {
  let child: ChildProcess | null = null;
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    for (let i = 0; i < 100; i += 1) {
      const probe = new Redis(`redis://127.0.0.1:${port}`, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      const up = await probe
        .connect()
        .then(() => probe.ping())
        .catch(() => null);
      probe.disconnect();
      if (up === 'PONG') return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`redis-server on port ${port} did not answer`);
  };
  const stop = async () => {
    const running = child;
    child = null;
    if (!running || running.exitCode !== null) return;
    const exited = new Promise((r) => running.once('exit', r));
    running.kill('SIGKILL');
    await exited;
  };
  await start();
  return { url: `redis://127.0.0.1:${port}`, start, stop };
}

const hasRedisServer = spawnSync('redis-server', ['--version']).status === 0;
const withRedisServer = hasRedisServer ? describe : describe.skip;

withRedisServer('rate limits while Redis is away (a redis-server of its own)', () => {
  let redis: Awaited<ReturnType<typeof ownRedis>>;
  let t: TestApp;
  const lines: { level: number; msg: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const redisLines = () => lines.filter((l) => l.msg.startsWith('rate-limit store (Redis)') && !l.msg.includes(' slow'));

  beforeAll(async () => {
    redis = await ownRedis(await freePort());
    t = await startTestApp({ logger, env: { REDIS_URL: redis.url, RATE_LIMIT_REQUESTS: '5', TRUST_PROXY: '1' } });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await redis?.stop();
  });

  /** Requests until one is refused (at most `max`), each answered 200 or 429; what they answered. */
  async function spend(token: string, max: number): Promise<number[]> {
    const statuses: number[] = [];
    for (let i = 0; i < max; i += 1) {
      const res = await t.as({ token }).get('/user/me');
      statuses.push(res.status);
      if (res.status === 429) {
        expect(res.body.code).toBe('rate_limited');
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
        break;
      }
    }
    return statuses;
  }

  /** Sends the token's requests until Redis holds its counter: the app's Redis client is connected. */
  async function countedInRedis(token: string): Promise<void> {
    const client = new Redis(redis.url);
    try {
      const key = `caller:api_token:${await t.factories.tokenId(token)}`;
      for (let i = 0; i < 100; i += 1) {
        expect((await t.as({ token }).get('/user/me')).status).toBe(200);
        if (Number(await client.get(key)) > 0) return;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error('The app never counted in Redis.');
    } finally {
      client.disconnect();
    }
  }

  it('keeps answering, and limiting in this process, while Redis is stopped; shares the counters again once it is back', async () => {
    // The app's client connects in the background: until it has, the stand-in counts.
    await countedInRedis((await t.factories.org()).token);
    const before = await t.factories.org();
    expect(await spend(before.token, 6)).toEqual([200, 200, 200, 200, 200, 429]);
    const client = new Redis(redis.url);
    const tokenId = await t.factories.tokenId(before.token);
    expect(Number(await client.get(`caller:api_token:${tokenId}`))).toBe(6);
    client.disconnect();

    await redis.stop();
    // Nothing waits for Redis: the in-process stand-in counts, with the same budget, so the API stays up and still limits.
    const during = await t.factories.org();
    expect(await spend(during.token, 8)).toEqual([200, 200, 200, 200, 200, 429]);
    // The warn comes with ioredis's first failed reconnection, which may follow those requests
    // (each failed at once, with no queue): waited for, bounded.
    for (let i = 0; i < 100 && redisLines().length === 0; i += 1) await new Promise((r) => setTimeout(r, 50));
    expect(redisLines().filter((l) => l.level === 40)).toHaveLength(1);

    await redis.start();
    // ioredis reconnects on its own within a couple of seconds; until then the stand-in counts.
    await countedInRedis((await t.factories.org()).token);
    const after = await t.factories.org();
    expect(await spend(after.token, 6)).toEqual([200, 200, 200, 200, 200, 429]);
    const again = new Redis(redis.url);
    try {
      expect(Number(await again.get(`caller:api_token:${await t.factories.tokenId(after.token)}`))).toBe(6);
    } finally {
      again.disconnect();
    }
    expect(redisLines().map((l) => [l.level, l.msg.split(':')[0]])).toEqual([
      [40, 'rate-limit store (Redis) unavailable'],
      [30, 'rate-limit store (Redis) is back'],
    ]);
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
  }, 60_000);
});
