// The JSON Schemas of synthetic tools at run time: the work one check may do is bounded
// whatever schema an organization saved (patterns by RE2 and a budget, uniqueItems linear).
import * as ajvEqual from 'ajv/dist/runtime/equal';
import {
  expandedSize,
  MAX_EXPANDED_SUBSCHEMAS,
  MAX_PATTERN_WORK,
  PatternWorkExceeded,
  runValidator,
  SchemaTooComplex,
  validatorFor,
} from '../../src/areas/synthetic-tools/schemas';

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

describe('how far a schema expands with its references followed', () => {
  const doubling = (depth: number, ref: (i: number) => string, defs: (i: number) => string) => {
    const $defs: Record<string, unknown> = { [defs(0)]: { type: 'string', $anchor: 'a0' } };
    for (let i = 1; i <= depth; i += 1) $defs[defs(i)] = { $anchor: `a${i}`, allOf: [{ $ref: ref(i - 1) }, { $ref: ref(i - 1) }] };
    return { type: 'object', $defs, properties: { x: { $ref: ref(depth) } } };
  };

  it('counts every use of a reference, by pointer or by anchor, and stops past the cap', () => {
    const byPointer = (depth: number) =>
      expandedSize(
        doubling(
          depth,
          (i) => `#/$defs/d${i}`,
          (i) => `d${i}`,
        ),
      ).count;
    expect(byPointer(8)).toBeGreaterThan(2 ** 8);
    expect(byPointer(9)).toBeGreaterThan(2 * byPointer(8) - 10);
    expect(byPointer(40)).toBe(MAX_EXPANDED_SUBSCHEMAS + 1);
    expect(
      expandedSize(
        doubling(
          40,
          (i) => `#a${i}`,
          (i) => `d${i}`,
        ),
      ).count,
    ).toBe(MAX_EXPANDED_SUBSCHEMAS + 1);
    expect(
      expandedSize(
        doubling(
          40,
          (i) => `#/$defs/d~1${i}`,
          (i) => `d/${i}`,
        ),
      ).count,
    ).toBe(MAX_EXPANDED_SUBSCHEMAS + 1);
  });

  it('counts a reference back into what is being expanded once, and names references it cannot follow', () => {
    const tree = { type: 'object', properties: { children: { type: 'array', items: { $ref: '#' } } } };
    // The root, properties, children, items; the reference to the root is not walked again.
    expect(expandedSize(tree)).toEqual({ count: 4, unresolved: [] });
    expect(expandedSize({ type: 'object', properties: { a: { $ref: '#/$defs/missing' } } }).unresolved).toEqual(['#/$defs/missing']);
    const byId = {
      $id: 'https://tools.example/t',
      type: 'object',
      $defs: { s: { $id: 'https://tools.example/s', type: 'string' } },
      properties: { a: { $ref: 'https://tools.example/s' } },
    };
    // Five objects, and the definition once more where it is used.
    expect(expandedSize(byId)).toEqual({ count: 6, unresolved: [] });
  });

  it('will not compile a stored schema past the cap', () => {
    expect(() =>
      validatorFor(
        'unit:doubling',
        doubling(
          30,
          (i) => `#/$defs/d${i}`,
          (i) => `d${i}`,
        ),
      ),
    ).toThrow(SchemaTooComplex);
  });
});
