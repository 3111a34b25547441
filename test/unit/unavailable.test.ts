import { isUnreachable } from '../../src/lib/unavailable';

describe('isUnreachable: a dependency failing "not now" rather than "not this"', () => {
  it('is true of network failures, timeouts and 5xx answers, however the SDK wraps them', () => {
    expect(isUnreachable(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(isUnreachable({ name: 'TimeoutError', message: 'Connection timed out after 5000 ms' })).toBe(true);
    expect(isUnreachable({ name: 'ServiceUnavailable', $metadata: { httpStatusCode: 503 } })).toBe(true);
    expect(isUnreachable({ name: 'Whatever', $metadata: { httpStatusCode: 500 } })).toBe(true);
    expect(isUnreachable({ name: 'Error', $cause: { code: 'ECONNRESET' } })).toBe(true);
    expect(isUnreachable(new Error('outer', { cause: { code: 'ETIMEDOUT' } }))).toBe(true);
    expect(isUnreachable(new Error('AWS SDK error wrapper for Error: connect ECONNREFUSED 127.0.0.1:40425'))).toBe(true);
  });

  it('is false of refusals that retrying cannot mend', () => {
    expect(isUnreachable({ name: 'AccessDenied', $metadata: { httpStatusCode: 403 } })).toBe(false);
    expect(isUnreachable({ name: 'NoSuchBucket', $metadata: { httpStatusCode: 404 } })).toBe(false);
    expect(isUnreachable(new Error('The bucket says no: ECONNREFUSED is not the issue'))).toBe(false);
    expect(isUnreachable(null)).toBe(false);
    expect(isUnreachable('ECONNREFUSED')).toBe(false);
  });
});
