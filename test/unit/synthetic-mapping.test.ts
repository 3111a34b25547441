// The mapping language of synthetic tools, as data only: pointers (RFC 6901, `~0`/`~1`),
// templates, literals, the save-time checks, and that nothing a member writes reaches a
// prototype or runs as code.
import {
  checkValue,
  MAX_BUILT_CHARS,
  evaluate,
  escapeToken,
  MappingError,
  parsePointer,
  parseTemplate,
  renderTemplate,
  resolvePointer,
  stepsReferred,
  type MappingProblem,
} from '../../src/areas/synthetic-tools/mapping';
import { resultOf } from '../../src/areas/synthetic-tools/synthetic-tools.run';

const input = { ticket_id: 4821, 'a/b': 'slash', 'm~n': 'tilde', '~1': 'literal tilde-one', nested: { list: [10, 20, 30] }, repo: 'acme/app' };
const results = new Map<string, unknown>([
  ['ticket', { subject: 'Export times out', id: 4821, tags: ['csv', 'export'] }],
  ['text', 'plain text'],
]);
const scope = { input, results };

function problems(value: unknown, earlier: string[] = ['ticket']): MappingProblem[] {
  const found: MappingProblem[] = [];
  checkValue(value, '/steps/1/arguments/q', new Set(earlier), 'an earlier step', found);
  return found;
}

describe('pointers', () => {
  it('parses tokens with ~1 → / before ~0 → ~', () => {
    expect(parsePointer('')).toEqual([]);
    expect(parsePointer('/')).toEqual(['']);
    expect(parsePointer('/a~1b/m~0n/~01')).toEqual(['a/b', 'm~n', '~1']);
    expect(() => parsePointer('a')).toThrow(MappingError);
    expect(() => parsePointer('/~2')).toThrow(MappingError);
    expect(escapeToken('a/b~c')).toBe('a~1b~0c');
  });

  it('resolves own members and in-range indexes only', () => {
    expect(resolvePointer(input, '/a~1b')).toEqual({ found: true, value: 'slash' });
    expect(resolvePointer(input, '/m~0n')).toEqual({ found: true, value: 'tilde' });
    expect(resolvePointer(input, '/~01')).toEqual({ found: true, value: 'literal tilde-one' });
    expect(resolvePointer(input, '/nested/list/2')).toEqual({ found: true, value: 30 });
    expect(resolvePointer(input, '/nested/list/3')).toEqual({ found: false });
    expect(resolvePointer(input, '/nested/list/01')).toEqual({ found: false });
    expect(resolvePointer(input, '/nested/list/-')).toEqual({ found: false });
    expect(resolvePointer(input, '')).toEqual({ found: true, value: input });
  });

  it('never walks into prototypes: __proto__, constructor and toString name nothing', () => {
    for (const p of ['/__proto__', '/constructor', '/toString', '/__proto__/polluted', '/nested/constructor/prototype', '/nested/list/length']) {
      expect(resolvePointer(input, p)).toEqual({ found: false });
    }
    // A member really named __proto__ (as JSON.parse makes it) is data like any other.
    const parsed = JSON.parse('{"__proto__": {"x": 1}}') as unknown;
    expect(resolvePointer(parsed, '/__proto__/x')).toEqual({ found: true, value: 1 });
  });
});

describe('templates', () => {
  it('inserts strings as they are, other values as JSON, missing ones as ""', () => {
    expect(renderTemplate('repo:{{input:/repo}} is:issue {{step:ticket:/subject}}', scope)).toBe('repo:acme/app is:issue Export times out');
    expect(renderTemplate('#{{input:/ticket_id}} {{step:ticket:/tags}} [{{input:/missing}}] [{{step:gone:/x}}]', scope)).toBe('#4821 ["csv","export"] [] []');
    expect(renderTemplate('{{step:text}}', scope)).toBe('plain text');
    expect(renderTemplate('{{input:/a~1b}}', scope)).toBe('slash');
  });

  it('writes {{{{ as a literal {{ and leaves other braces alone', () => {
    expect(renderTemplate('{{{{input:/repo}} and }} {', scope)).toBe('{{input:/repo}} and }} {');
  });

  it('refuses anything but input and step placeholders: no expressions, no names', () => {
    for (const bad of [
      '{{constructor}}',
      '{{input}}',
      '{{ input:/repo }}',
      '{{step:Ticket:/x}}',
      '{{process.exit(1)}}',
      '{{this}}',
      '{{input:repo}}',
      'open {{',
    ]) {
      expect(() => parseTemplate(bad)).toThrow(MappingError);
    }
    expect(parseTemplate('a{{step:ticket}}b')).toEqual([{ text: 'a' }, { step: 'ticket', pointer: '' }, { text: 'b' }]);
  });
});

describe('evaluate', () => {
  it('maps input, step results, templates, literals and plain JSON at any depth', () => {
    const value = {
      id: { $input: '/ticket_id' },
      missing: { $input: '/nope' },
      fallback: { $input: '/nope', default: 7 },
      subject: { $step: 'ticket', pointer: '/subject' },
      whole: { $step: 'text' },
      line: { $template: 'T-{{input:/ticket_id}}' },
      literal: { $literal: { $input: 'not a reference', $step: 'x' } },
      list: [1, { $input: '/nested/list/0' }, [{ $step: 'ticket', pointer: '/tags/1' }]],
      plain: { a: null, b: true, c: 'x' },
    };
    expect(evaluate(value, scope)).toEqual({
      id: 4821,
      missing: null,
      fallback: 7,
      subject: 'Export times out',
      whole: 'plain text',
      line: 'T-4821',
      literal: { $input: 'not a reference', $step: 'x' },
      list: [1, 10, ['export']],
      plain: { a: null, b: true, c: 'x' },
    });
  });

  it('a step reference that names nothing uses its default, else fails the run', () => {
    expect(evaluate({ $step: 'ticket', pointer: '/nope', default: [] }, scope)).toEqual([]);
    expect(evaluate({ $step: 'failed', default: 'd' }, scope)).toBe('d');
    expect(() => evaluate({ $step: 'ticket', pointer: '/nope' }, scope)).toThrow(/has nothing at "\/nope", and it has no default/);
  });

  it('builds objects whose __proto__ member is data: no prototype changes, nothing polluted', () => {
    const mapping = JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"$input": "/ticket_id"}}') as unknown;
    const out = evaluate(mapping, scope) as Record<string, unknown>;
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.keys(out)).toEqual(['__proto__', 'constructor']);
    expect(out.constructor).toBe(4821);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(JSON.stringify(out)).toBe('{"__proto__":{"polluted":true},"constructor":4821}');
    // Copying an input or result with such a member does the same.
    const copied = evaluate({ $input: '' }, { input: JSON.parse('{"__proto__": {"polluted": 1}}'), results }) as Record<string, unknown>;
    expect(Object.getPrototypeOf(copied)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('runs nothing: a template or value that looks like code stays text', () => {
    let ran = false;
    (globalThis as Record<string, unknown>).__syntheticProbe = () => {
      ran = true;
    };
    expect(evaluate({ $literal: '${__syntheticProbe()}' }, scope)).toBe('${__syntheticProbe()}');
    expect(evaluate('`${__syntheticProbe()}`', scope)).toBe('`${__syntheticProbe()}`');
    expect(() => evaluate({ $template: '{{__syntheticProbe()}}' }, scope)).toThrow(MappingError);
    expect(evaluate({ $template: '{{input:/constructor}}{{input:/__proto__}}' }, scope)).toBe('');
    expect(ran).toBe(false);
    delete (globalThis as Record<string, unknown>).__syntheticProbe;
  });
});

describe('checks when saved', () => {
  it('accepts the reference forms and plain JSON', () => {
    expect(
      problems({
        a: { $input: '/x', default: 1 },
        b: [{ $step: 'ticket', pointer: '/a~1b' }],
        c: { $template: '{{step:ticket:/s}}' },
        d: { $literal: { $x: 1 } },
      }),
    ).toEqual([]);
  });

  it('points at every problem', () => {
    expect(problems({ $step: 'later' })).toEqual([{ pointer: '/steps/1/arguments/q/$step', message: 'refers to step "later", which is not an earlier step' }]);
    expect(problems({ x: { $template: 'see {{step:later:/a}}' } })).toEqual([
      { pointer: '/steps/1/arguments/q/x/$template', message: 'refers to step "later", which is not an earlier step' },
    ]);
    expect(problems({ $input: 'no-slash' })[0]?.pointer).toBe('/steps/1/arguments/q/$input');
    expect(problems({ $input: '/x', extra: 1 })[0]?.pointer).toBe('/steps/1/arguments/q/extra');
    expect(problems({ 'a/b': { $eval: 'x' } })[0]?.pointer).toBe('/steps/1/arguments/q/a~1b/$eval');
    expect(problems({ $template: '{{constructor}}' })[0]).toMatchObject({ pointer: '/steps/1/arguments/q/$template' });
    let deep: unknown = 1;
    for (let i = 0; i < 25; i += 1) deep = [deep];
    expect(problems(deep)[0]?.message).toMatch(/deeper than 20/);
  });

  it('knows which steps a value refers to', () => {
    expect([...stepsReferred({ a: { $step: 'one' }, b: [{ $template: '{{step:two:/x}} {{input:/y}}' }], c: { $literal: { $step: 'no' } } })]).toEqual([
      'one',
      'two',
    ]);
  });
});

describe("a step's result", () => {
  it('is structuredContent, else text as JSON, else the text', () => {
    expect(resultOf({ content: [{ type: 'text', text: 'ignored' }], structuredContent: { a: 1 } })).toEqual({ a: 1 });
    expect(resultOf({ content: [{ type: 'text', text: '{"b": [1, 2]}' }] })).toEqual({ b: [1, 2] });
    expect(
      resultOf({
        content: [
          { type: 'text', text: 'one' },
          { type: 'text', text: 'two' },
        ],
      }),
    ).toBe('one\ntwo');
  });
});

describe('the budget of a built value', () => {
  const big = { big: 'x'.repeat(100_000) };
  const many = (n: number, ref: unknown) => Array.from({ length: n }, () => ref);

  it('stops copying references once their JSON would pass MAX_BUILT_CHARS', () => {
    const fits = Math.floor(MAX_BUILT_CHARS / 100_002) - 1;
    expect((evaluate(many(fits, { $input: '/big' }), { input: big, results: new Map() }) as string[]).length).toBe(fits);
    expect(() => evaluate(many(fits + 2, { $input: '/big' }), { input: big, results: new Map() })).toThrow(MappingError);
  });

  it('counts what templates and nested copies build, and each evaluation has its own budget', () => {
    const template = { $template: '{{input:/big}}'.repeat(50) };
    expect(() => evaluate(template, { input: big, results: new Map() })).toThrow(/4 MiB/);
    const nested = { $input: '' };
    expect(() => evaluate(many(50, nested), { input: big, results: new Map() })).toThrow(MappingError);
    expect(evaluate({ one: { $input: '/big' } }, { input: big, results: new Map() })).toEqual({ one: big.big });
    expect(evaluate({ two: { $input: '/big' } }, { input: big, results: new Map() })).toEqual({ two: big.big });
  });
});
