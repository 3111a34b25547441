import { matchingStep } from '../../src/identity/second-factors';

/**
 * RFC 6238 Appendix B's SHA-1 test vectors (secret "12345678901234567890"), read as the
 * 6-digit codes authenticator apps show: the low six digits of the 8-digit values.
 */
const SECRET = 'GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ'; // base32 of the ASCII secret
const VECTORS: Array<[number, string]> = [
  [59, '94287082'],
  [1111111109, '07081804'],
  [1111111111, '14050471'],
  [1234567890, '89005924'],
  [2000000000, '69279037'],
  [20000000000, '65353130'],
];

describe('TOTP against RFC 6238', () => {
  it.each(VECTORS)('accepts the code of time %i in its own 30-second step', async (time, code) => {
    expect(await matchingStep(SECRET, code.slice(-6), new Date(time * 1000))).toBe(Math.floor(time / 30));
  });

  it.each(VECTORS)('accepts the code of time %i one step either side (clock drift), and no further', async (time, code) => {
    const sixDigits = code.slice(-6);
    expect(await matchingStep(SECRET, sixDigits, new Date((time + 30) * 1000))).toBe(Math.floor(time / 30));
    expect(await matchingStep(SECRET, sixDigits, new Date((time - 30) * 1000))).toBe(Math.floor(time / 30));
    expect(await matchingStep(SECRET, sixDigits, new Date((time + 90) * 1000))).toBeNull();
  });
});
