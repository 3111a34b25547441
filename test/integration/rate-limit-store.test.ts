import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { startTestApp, type TestApp } from '../support/app';

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
