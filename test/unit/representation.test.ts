import { chooseCoding, noneMatch } from '../../src/http/representation';

/* How a stored representation reads the client's Accept-Encoding and If-None-Match (the sending is tested over HTTP in health-schema and organization-logo). */

describe('chooseCoding', () => {
  it('prefers brotli, then gzip, honours q-values and *, and sends as is otherwise', () => {
    expect(chooseCoding(undefined)).toBeNull();
    expect(chooseCoding('')).toBeNull();
    expect(chooseCoding('identity')).toBeNull();
    expect(chooseCoding('deflate')).toBeNull();
    expect(chooseCoding('gzip, deflate, br')).toBe('br');
    expect(chooseCoding('gzip, deflate')).toBe('gzip');
    expect(chooseCoding('br;q=0.5, gzip')).toBe('gzip');
    expect(chooseCoding('gzip;q=0, br;q=0')).toBeNull();
    expect(chooseCoding('*')).toBe('br');
    expect(chooseCoding('*, br;q=0')).toBe('gzip');
    expect(chooseCoding('GZIP ; Q=0.8')).toBe('gzip');
    // A weight that cannot be read is left out, as if none was given.
    expect(chooseCoding('gzip;q=nonsense')).toBe('gzip');
  });
});

describe('noneMatch', () => {
  it('matches the tag, weakly, in a list, or *; nothing else', () => {
    expect(noneMatch(undefined, '"a"')).toBe(false);
    expect(noneMatch('"a"', '"a"')).toBe(true);
    expect(noneMatch('W/"a"', '"a"')).toBe(true);
    expect(noneMatch('"b", "a"', '"a"')).toBe(true);
    expect(noneMatch('*', '"a"')).toBe(true);
    expect(noneMatch('"b"', '"a"')).toBe(false);
    expect(noneMatch('a', '"a"')).toBe(false);
  });
});
