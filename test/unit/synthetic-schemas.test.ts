// The JSON Schemas of synthetic tools at run time: the work one check may do is bounded
// whatever schema an organization saved (patterns by RE2 and a budget, uniqueItems linear).
import * as ajvEqual from 'ajv/dist/runtime/equal';
import { MAX_PATTERN_WORK, PatternWorkExceeded, runValidator, validatorFor } from '../../src/areas/synthetic-tools/schemas';

afterEach(() => jest.restoreAllMocks());

it('checks uniqueItems without comparing pairs of items (work linear in the array)', () => {
  // Ajv's own check compares every pair of items not all of one scalar type: 2,000 items, 2 million comparisons.
  const compare = jest.spyOn(ajvEqual as unknown as { default: (a: unknown, b: unknown) => boolean }, 'default');
  const validate = validatorFor('unit:unique', { type: 'object', properties: { xs: { type: 'array', uniqueItems: true } } });
  const xs = Array.from({ length: 2_000 }, (_, i) => (i % 2 === 0 ? i : { i }));
  expect(runValidator(validate, { xs })).toBe(true);
  expect(runValidator(validate, { xs: [...xs, { i: 1 }] })).toBe(false);
  expect(validate.errors?.[0]).toMatchObject({ instancePath: '/xs', keyword: 'uniqueItems' });
  expect(compare.mock.calls.length).toBeLessThan(xs.length);
});

it('treats equal JSON values as duplicates whatever the order of their members', () => {
  const validate = validatorFor('unit:unique-order', { type: 'object', properties: { xs: { type: 'array', uniqueItems: true } } });
  expect(
    runValidator(validate, {
      xs: [
        { a: 1, b: [2, { c: 3 }] },
        { b: [2, { c: 3 }], a: 1 },
      ],
    }),
  ).toBe(false);
  expect(runValidator(validate, { xs: [{ a: 1 }, { a: '1' }, [1], 1, '1', null, false] })).toBe(true);
});

it('stops a check before the pattern test that would pass MAX_PATTERN_WORK, and only inside runValidator', () => {
  const validate = validatorFor('unit:pattern', { type: 'object', properties: { s: { type: 'string', pattern: '^(a|b)+$' } } });
  const long = 'a'.repeat(MAX_PATTERN_WORK);
  expect(() => runValidator(validate, { s: long })).toThrow(PatternWorkExceeded);
  expect(runValidator(validate, { s: 'abab' })).toBe(true);
  // Patterns of one schema stay apart (Ajv shares compiled patterns by their key).
  const two = validatorFor('unit:two-patterns', {
    type: 'object',
    properties: { a: { type: 'string', pattern: '^a+$' }, b: { type: 'string', pattern: '^b+$' } },
  });
  expect(runValidator(two, { a: 'aaa', b: 'bbb' })).toBe(true);
  expect(runValidator(two, { a: 'bbb', b: 'aaa' })).toBe(false);
});
