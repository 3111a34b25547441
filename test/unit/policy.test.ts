import { compileGlob, globMatch } from '../../src/access/policy/glob';
import { Policy, type PolicyRestrictionInput, type ToolRef } from '../../src/access/policy';

describe('RestrictionToolPattern globs', () => {
  const cases: [pattern: string, name: string, matches: boolean][] = [
    ['delete_*', 'delete_issue', true],
    ['delete_*', 'delete_', true], // `*` matches none
    ['delete_*', 'bulk_delete_issue', false], // the whole name must match
    ['delete_*', 'Delete_issue', false], // case-sensitive
    ['*_issue', 'delete_issue', true],
    ['*_issue', 'delete_issues', false],
    ['*', '', true],
    ['*', 'anything.at-all', true],
    ['?', 'a', true],
    ['?', '', false],
    ['?', 'ab', false],
    ['get_?', 'get_x', true],
    ['get_?', 'get_xy', false],
    ['get_??', 'get_xy', true],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'aXXbYYc', true],
    ['a*b*c', 'aXXbYY', false],
    ['a*b*c', 'acb', false],
    ['a**b', 'ab', true],
    ['*a*', 'bab', true],
    ['*?', '', false],
    ['*?', 'x', true],
    ['?*?', 'x', false],
    ['?*?', 'xy', true],
    ['list.repos', 'list.repos', true],
    ['list.repos', 'listXrepos', false], // `.` is a literal, not a regex wildcard
    ['a-b', 'a-b', true],
    ['exact', 'exact', true],
    ['exact', 'exactly', false],
    ['exact', 'inexact', false],
    ['*x', 'xxxxxxxxxx', true],
    ['a*ab', 'aab', true],
    ['ab*ba', 'aba', false], // prefix and suffix do not overlap
    ['ab*ba', 'abba', true],
    ['*ab*ab*', 'xabab', true],
    ['*ab*ab*', 'xab', false],
    ['a*?b', 'ab', false],
    ['a*?b', 'axb', true],
  ];
  it.each(cases)('%s against %s is %s', (pattern, name, expected) => {
    expect(compileGlob(pattern)(name)).toBe(expected);
    expect(globMatch(pattern.replace(/\*+/g, '*'), name)).toBe(expected);
  });

  it('characters regular expressions treat specially are literals', () => {
    for (const p of ['(a|b)', '[ab]', 'a+', '^a$', 'a{2}', '\\d', 'a.c']) {
      expect(compileGlob(p)(p)).toBe(true);
      expect(compileGlob(p)('a')).toBe(false);
      expect(compileGlob(p)('aa')).toBe(false);
    }
    expect(compileGlob('a.c')('abc')).toBe(false);
  });

  it('stays fast on patterns that make backtracking regular expressions explode', () => {
    const pattern = `${'*a'.repeat(60)}*b`;
    const name = 'a'.repeat(128);
    const started = process.hrtime.bigint();
    expect(compileGlob(pattern)(name)).toBe(false);
    expect(Number(process.hrtime.bigint() - started) / 1e6).toBeLessThan(50);
  });
});

describe('Policy.evaluate (pure)', () => {
  const subject = { orgId: 'org_x', userId: 'usr_x', roleIds: [], teamIds: [] };
  const r = (
    id: string,
    effect: PolicyRestrictionInput['effect'],
    match: Partial<Pick<PolicyRestrictionInput, 'connector_slug' | 'tool_pattern' | 'synthetic_tool_id'>>,
    exceptions: PolicyRestrictionInput['exceptions'] = [],
  ): PolicyRestrictionInput => ({
    id,
    effect,
    connector_slug: match.connector_slug ?? null,
    tool_pattern: match.tool_pattern ?? null,
    synthetic_tool_id: match.synthetic_tool_id ?? null,
    exceptions,
  });
  const up = (connector_slug: string, tool: string): ToolRef => ({ kind: 'upstream', connector_slug, tool });
  const syn = (id: string, steps: [string, string][]): ToolRef => ({
    kind: 'synthetic',
    id,
    steps: steps.map(([connector_slug, tool]) => ({ connector_slug, tool })),
  });

  it('nothing restricted: listed and callable', () => {
    expect(Policy.of(subject, []).evaluate(up('github', 'delete_repo'))).toEqual({ listed: true, callable: true, deniedBy: [], heldBy: [] });
  });

  it('deny hides and refuses; deny wins over require_approval', () => {
    const p = Policy.of(subject, [r('rst_a', 'require_approval', { connector_slug: 'github' }), r('rst_d', 'deny', { tool_pattern: 'delete_*' })]);
    expect(p.evaluate(up('github', 'delete_repo'))).toEqual({ listed: false, callable: false, deniedBy: ['rst_d'], heldBy: ['rst_a'] });
    expect(p.evaluate(up('github', 'list_repos'))).toEqual({ listed: true, callable: false, deniedBy: [], heldBy: ['rst_a'] });
    expect(p.evaluate(up('linear', 'delete_issue'))).toEqual({ listed: false, callable: false, deniedBy: ['rst_d'], heldBy: [] });
    expect(p.evaluate(up('linear', 'list_issues'))).toEqual({ listed: true, callable: true, deniedBy: [], heldBy: [] });
  });

  it('exceptions: whole restriction, one connector, one tool', () => {
    const hold = (exceptions: PolicyRestrictionInput['exceptions']) =>
      Policy.of(subject, [r('rst_a', 'require_approval', { tool_pattern: 'delete_*' }, exceptions)]);
    expect(hold([{ connector_slug: null, tool_name: null, synthetic_tool_id: null }]).evaluate(up('linear', 'delete_issue')).callable).toBe(true);
    const connector = hold([{ connector_slug: 'github', tool_name: null, synthetic_tool_id: null }]);
    expect(connector.evaluate(up('github', 'delete_repo')).callable).toBe(true);
    expect(connector.evaluate(up('linear', 'delete_issue')).heldBy).toEqual(['rst_a']);
    const tool = hold([{ connector_slug: 'github', tool_name: 'delete_branch', synthetic_tool_id: null }]);
    expect(tool.evaluate(up('github', 'delete_branch')).callable).toBe(true);
    expect(tool.evaluate(up('github', 'delete_repo')).callable).toBe(false);
  });

  it('synthetic tools: by id, and through a step; held until every matched step is covered', () => {
    const p = Policy.of(subject, [
      r('rst_id', 'require_approval', { synthetic_tool_id: 'stool_a' }),
      r('rst_step', 'require_approval', { connector_slug: 'github', tool_pattern: 'delete_*' }, [
        { connector_slug: 'github', tool_name: 'delete_branch', synthetic_tool_id: null },
      ]),
      r('rst_deny', 'deny', { connector_slug: 'slack', tool_pattern: 'post_*' }),
    ]);
    expect(p.evaluate(syn('stool_a', [['linear', 'list_issues']]))).toEqual({ listed: true, callable: false, deniedBy: [], heldBy: ['rst_id'] });
    expect(p.evaluate(syn('stool_b', [['github', 'delete_branch']])).callable).toBe(true);
    expect(
      p.evaluate(
        syn('stool_b', [
          ['github', 'delete_branch'],
          ['github', 'delete_repo'],
        ]),
      ).heldBy,
    ).toEqual(['rst_step']);
    expect(
      p.evaluate(
        syn('stool_c', [
          ['linear', 'list_issues'],
          ['slack', 'post_message'],
        ]),
      ),
    ).toEqual({ listed: false, callable: false, deniedBy: ['rst_deny'], heldBy: [] });
    // A restriction on a synthetic tool never matches an upstream tool.
    expect(p.evaluate(up('linear', 'list_issues')).callable).toBe(true);
  });
});
