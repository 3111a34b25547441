import { startTestApp, type TestApp } from '../support/app';

// Counters in PostgreSQL are what several replicas share; the embedded database has no pool.
const onServer = process.env.TEST_DATABASE_URL ? describe : describe.skip;

onServer('rate limits kept in PostgreSQL', () => {
  let t: TestApp;
  beforeAll(async () => {
    // DATABASE_URL only satisfies the setting's check; the test app uses its own fresh database's pool.
    t = await startTestApp({ env: { RATE_LIMIT_STORE: 'postgres', DATABASE_URL: 'postgres://unused', RATE_LIMIT_REQUESTS: '2' } });
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
    const rows = await t.db.selectFrom('rate_limits').selectAll().execute();
    expect(rows).toEqual([expect.objectContaining({ points: 3 })]);
  });
});
