import { isDatabaseUnavailable } from '../../src/db/unavailable';

/*
 * Which failures are the database being away (503 with Retry-After: retry) rather than a
 * defect (500). The shapes are those pg and node:net raise; test/db/credential-cache.test.ts
 * cuts a real server's connections and sees 503s, never a 500.
 */
describe('isDatabaseUnavailable', () => {
  it.each([
    ['a connection refused', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })],
    ['an administrator ending the backend', Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' })],
    ['a connection exception (class 08)', Object.assign(new Error('connection failure'), { code: '08006' })],
    ['the server refusing new connections', Object.assign(new Error('sorry, too many clients already'), { code: '53300' })],
    ['a pooled connection that died', new Error('Connection terminated unexpectedly')],
    ['a pool that cannot connect in time', new Error('timeout exceeded when trying to connect')],
  ])('says yes to %s', (_what, err) => {
    expect(isDatabaseUnavailable(err)).toBe(true);
  });

  it.each([
    ['a unique violation', Object.assign(new Error('duplicate key value'), { code: '23505' })],
    ['a syntax error', Object.assign(new Error('syntax error at or near'), { code: '42601' })],
    ['a plain bug', new TypeError("Cannot read properties of undefined (reading 'id')")],
    ['nothing', undefined],
  ])('says no to %s', (_what, err) => {
    expect(isDatabaseUnavailable(err)).toBe(false);
  });
});
