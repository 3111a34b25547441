import type { components } from '../../generated/openapi';
import { newId } from '../../src/lib/ids';
import { type ToolRef, loadPolicy, loadPolicyForMember, policySubjectOf } from '../../src/access/policy';
import { startTestApp, type TestApp } from '../support/app';

/*
 * The policy table: (restrictions, the member's roles and teams, their access requests, the
 * tool) → listed? callable? held? Restrictions and access requests are made over HTTP (the
 * approvals by a person in a session), roles and teams by the factories (their operations
 * are not built yet), then `loadPolicy(...).evaluate(...)` runs on the app's database, as
 * the tool listings and the MCP endpoint will.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

type Who = 'everyone' | { roles?: ('R1' | 'R2')[]; teams?: ('T1' | 'T2')[]; users?: ('me' | 'other')[] };
interface RestrictionSpec {
  effect: 'deny' | 'require_approval';
  match?: { connector_slug?: string; tool_pattern?: string; synthetic_tool?: 'S1' };
  who?: Who;
  active?: boolean;
  /** Requests `me` files against it and what becomes of them. */
  requests?: { connector_slug?: string; tool_name?: string; outcome: 'approved' | 'pending' | 'denied' | 'withdrawn'; expiresInMinutes?: number }[];
  /** What it matches after the requests were resolved (an administrator's later edit). */
  thenMatch?: { connector_slug?: string; tool_pattern?: string; synthetic_tool?: 'S1' };
}
interface Row {
  name: string;
  restrictions: RestrictionSpec[];
  me?: { roles?: ('R1' | 'R2')[]; teams?: ('T1' | 'T2')[] };
  tool: ToolRef | { kind: 'synthetic'; id: 'S1'; steps: { connector_slug: string; tool: string }[] };
  /** Minutes after now at which the policy is loaded (exceptions expire). */
  atMinutes?: number;
  expect: { listed: boolean; callable: boolean; denied?: number[]; held?: number[] };
}

const up = (connector_slug: string, tool: string): ToolRef => ({ kind: 'upstream', connector_slug, tool });
const s1 = (...steps: [string, string][]) => ({
  kind: 'synthetic' as const,
  id: 'S1' as const,
  steps: steps.map(([connector_slug, tool]) => ({ connector_slug, tool })),
});
const deleteOnTickets = { connector_slug: 'tickets-demo', tool_pattern: 'delete_*' };
const OPEN = { listed: true, callable: true, denied: [], held: [] };
const DENIED = (...i: number[]) => ({ listed: false, callable: false, denied: i, held: [] });
const HELD = (...i: number[]) => ({ listed: true, callable: false, denied: [], held: i });

const TABLE: Row[] = [
  { name: 'nothing restricted', restrictions: [], tool: up('tickets-demo', 'delete_ticket'), expect: OPEN },
  // Globs
  {
    name: 'deny by connector and glob',
    restrictions: [{ effect: 'deny', match: deleteOnTickets }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: DENIED(0),
  },
  { name: 'glob is the whole name', restrictions: [{ effect: 'deny', match: deleteOnTickets }], tool: up('tickets-demo', 'bulk_delete_ticket'), expect: OPEN },
  { name: '`*` matches none', restrictions: [{ effect: 'deny', match: deleteOnTickets }], tool: up('tickets-demo', 'delete_'), expect: DENIED(0) },
  { name: 'another connector', restrictions: [{ effect: 'deny', match: deleteOnTickets }], tool: up('docs-demo', 'delete_doc'), expect: OPEN },
  { name: 'case-sensitive', restrictions: [{ effect: 'deny', match: { tool_pattern: 'Delete_*' } }], tool: up('tickets-demo', 'delete_ticket'), expect: OPEN },
  { name: '`?` is one character', restrictions: [{ effect: 'deny', match: { tool_pattern: 'get_?' } }], tool: up('docs-demo', 'get_x'), expect: DENIED(0) },
  { name: '`?` is not two', restrictions: [{ effect: 'deny', match: { tool_pattern: 'get_?' } }], tool: up('docs-demo', 'get_xy'), expect: OPEN },
  { name: '`?` is not none', restrictions: [{ effect: 'deny', match: { tool_pattern: 'get_?' } }], tool: up('docs-demo', 'get_'), expect: OPEN },
  { name: '`.` is a literal', restrictions: [{ effect: 'deny', match: { tool_pattern: 'a.c' } }], tool: up('docs-demo', 'abc'), expect: OPEN },
  {
    name: 'stars in the middle',
    restrictions: [{ effect: 'deny', match: { tool_pattern: '*_ticket*' } }],
    tool: up('docs-demo', 'close_tickets'),
    expect: DENIED(0),
  },
  {
    name: 'connector only: all its tools',
    restrictions: [{ effect: 'deny', match: { connector_slug: 'docs-demo' } }],
    tool: up('docs-demo', 'anything'),
    expect: DENIED(0),
  },
  { name: 'match left out: every tool', restrictions: [{ effect: 'deny' }], tool: up('keys-demo', 'anything'), expect: DENIED(0) },
  // Effects
  {
    name: 'require_approval lists but holds',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: HELD(0),
  },
  {
    name: 'deny wins over require_approval',
    restrictions: [
      { effect: 'require_approval', match: { connector_slug: 'tickets-demo' } },
      { effect: 'deny', match: { tool_pattern: 'delete_*' } },
    ],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: { listed: false, callable: false, denied: [1], held: [0] },
  },
  {
    name: 'deny wins over an approved exception',
    restrictions: [
      { effect: 'require_approval', match: deleteOnTickets, requests: [{ outcome: 'approved' }] },
      { effect: 'deny', match: deleteOnTickets },
    ],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: DENIED(1),
  },
  {
    name: 'inactive deny holds nothing',
    restrictions: [{ effect: 'deny', match: deleteOnTickets, active: false }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: OPEN,
  },
  {
    name: 'inactive require_approval holds nothing',
    restrictions: [{ effect: 'require_approval', active: false }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: OPEN,
  },
  // Whom it applies to
  { name: 'by role held', restrictions: [{ effect: 'deny', who: { roles: ['R1'] } }], me: { roles: ['R1'] }, tool: up('docs-demo', 'x'), expect: DENIED(0) },
  { name: 'by role not held', restrictions: [{ effect: 'deny', who: { roles: ['R1'] } }], me: { roles: ['R2'] }, tool: up('docs-demo', 'x'), expect: OPEN },
  {
    name: 'by team, a member',
    restrictions: [{ effect: 'deny', who: { teams: ['T1'] } }],
    me: { teams: ['T1', 'T2'] },
    tool: up('docs-demo', 'x'),
    expect: DENIED(0),
  },
  {
    name: 'by team, not a member',
    restrictions: [{ effect: 'deny', who: { teams: ['T1'] } }],
    me: { teams: ['T2'] },
    tool: up('docs-demo', 'x'),
    expect: OPEN,
  },
  { name: 'by user, me', restrictions: [{ effect: 'deny', who: { users: ['me'] } }], tool: up('docs-demo', 'x'), expect: DENIED(0) },
  { name: 'by user, someone else', restrictions: [{ effect: 'deny', who: { users: ['other'] } }], tool: up('docs-demo', 'x'), expect: OPEN },
  {
    name: 'any of roles, teams, users',
    restrictions: [{ effect: 'deny', who: { roles: ['R2'], teams: ['T2'], users: ['other'] } }],
    me: { teams: ['T2'] },
    tool: up('docs-demo', 'x'),
    expect: DENIED(0),
  },
  // Exceptions
  {
    name: 'exception for the whole restriction',
    restrictions: [{ effect: 'require_approval', match: { tool_pattern: 'delete_*' }, requests: [{ outcome: 'approved' }] }],
    tool: up('docs-demo', 'delete_doc'),
    expect: OPEN,
  },
  {
    name: 'exception for the connector',
    restrictions: [{ effect: 'require_approval', match: { tool_pattern: 'delete_*' }, requests: [{ connector_slug: 'docs-demo', outcome: 'approved' }] }],
    tool: up('docs-demo', 'delete_doc'),
    expect: OPEN,
  },
  {
    name: 'exception for another connector',
    restrictions: [{ effect: 'require_approval', match: { tool_pattern: 'delete_*' }, requests: [{ connector_slug: 'docs-demo', outcome: 'approved' }] }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: HELD(0),
  },
  {
    name: 'exception for the tool',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ tool_name: 'delete_ticket', outcome: 'approved' }] }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: OPEN,
  },
  {
    name: 'exception for another tool',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ tool_name: 'delete_ticket', outcome: 'approved' }] }],
    tool: up('tickets-demo', 'delete_comment'),
    expect: HELD(0),
  },
  {
    name: 'exception not yet expired',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ outcome: 'approved', expiresInMinutes: 60 }] }],
    atMinutes: 30,
    tool: up('tickets-demo', 'delete_ticket'),
    expect: OPEN,
  },
  {
    name: 'exception expired',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ outcome: 'approved', expiresInMinutes: 60 }] }],
    atMinutes: 90,
    tool: up('tickets-demo', 'delete_ticket'),
    expect: HELD(0),
  },
  {
    name: 'pending request grants nothing',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ outcome: 'pending' }] }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: HELD(0),
  },
  {
    name: 'denied request grants nothing',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ outcome: 'denied' }] }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: HELD(0),
  },
  {
    name: 'withdrawn request grants nothing',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ outcome: 'withdrawn' }] }],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: HELD(0),
  },
  {
    name: 'an exception is for its own restriction only',
    restrictions: [
      { effect: 'require_approval', match: deleteOnTickets, requests: [{ outcome: 'approved' }] },
      { effect: 'require_approval', match: { connector_slug: 'tickets-demo' } },
    ],
    tool: up('tickets-demo', 'delete_ticket'),
    expect: HELD(1),
  },
  // What an exception covers is fixed when it is approved
  {
    name: 'exception for the whole restriction, the pattern broadened since: the new tools are held',
    restrictions: [
      {
        effect: 'require_approval',
        match: { connector_slug: 'tickets-demo', tool_pattern: 'search' },
        requests: [{ outcome: 'approved' }],
        thenMatch: { connector_slug: 'tickets-demo', tool_pattern: '*' },
      },
    ],
    tool: up('tickets-demo', 'delete_repo'),
    expect: HELD(0),
  },
  {
    name: 'exception for the whole restriction, the pattern broadened since: what was approved stays open',
    restrictions: [
      {
        effect: 'require_approval',
        match: { connector_slug: 'tickets-demo', tool_pattern: 'search' },
        requests: [{ outcome: 'approved' }],
        thenMatch: { connector_slug: 'tickets-demo', tool_pattern: '*' },
      },
    ],
    tool: up('tickets-demo', 'search'),
    expect: OPEN,
  },
  {
    name: 'exception for the whole restriction, the connector dropped since: other connectors are held',
    restrictions: [
      {
        effect: 'require_approval',
        match: { connector_slug: 'tickets-demo', tool_pattern: 'search' },
        requests: [{ outcome: 'approved' }],
        thenMatch: { tool_pattern: 'search' },
      },
    ],
    tool: up('docs-demo', 'search'),
    expect: HELD(0),
  },
  {
    name: 'exception for a restriction on upstream tools, since moved to a synthetic tool: the synthetic tool is held',
    restrictions: [{ effect: 'require_approval', match: { tool_pattern: 'search' }, requests: [{ outcome: 'approved' }], thenMatch: { synthetic_tool: 'S1' } }],
    tool: s1(['docs-demo', 'read_doc']),
    expect: HELD(0),
  },
  // Synthetic tools
  {
    name: 'synthetic tool denied by id',
    restrictions: [{ effect: 'deny', match: { synthetic_tool: 'S1' } }],
    tool: s1(['docs-demo', 'read_doc']),
    expect: DENIED(0),
  },
  {
    name: 'synthetic tool held by id',
    restrictions: [{ effect: 'require_approval', match: { synthetic_tool: 'S1' } }],
    tool: s1(['docs-demo', 'read_doc']),
    expect: HELD(0),
  },
  {
    name: 'synthetic tool by id, approved',
    restrictions: [{ effect: 'require_approval', match: { synthetic_tool: 'S1' }, requests: [{ outcome: 'approved' }] }],
    tool: s1(['docs-demo', 'read_doc']),
    expect: OPEN,
  },
  {
    name: 'synthetic tool denied through a step',
    restrictions: [{ effect: 'deny', match: deleteOnTickets }],
    tool: s1(['docs-demo', 'read_doc'], ['tickets-demo', 'delete_ticket']),
    expect: DENIED(0),
  },
  {
    name: 'synthetic tool whose steps match nothing',
    restrictions: [{ effect: 'deny', match: deleteOnTickets }],
    tool: s1(['docs-demo', 'read_doc'], ['tickets-demo', 'list_tickets']),
    expect: OPEN,
  },
  {
    name: 'synthetic tool held through a step',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets }],
    tool: s1(['tickets-demo', 'delete_ticket']),
    expect: HELD(0),
  },
  {
    name: 'synthetic tool through a step, the step’s tool approved',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ tool_name: 'delete_ticket', outcome: 'approved' }] }],
    tool: s1(['tickets-demo', 'delete_ticket']),
    expect: OPEN,
  },
  {
    name: 'synthetic tool through two steps, one approved',
    restrictions: [{ effect: 'require_approval', match: deleteOnTickets, requests: [{ tool_name: 'delete_ticket', outcome: 'approved' }] }],
    tool: s1(['tickets-demo', 'delete_ticket'], ['tickets-demo', 'delete_comment']),
    expect: HELD(0),
  },
  {
    name: 'a restriction on a synthetic tool does not touch upstream tools',
    restrictions: [{ effect: 'deny', match: { synthetic_tool: 'S1' } }],
    tool: up('docs-demo', 'read_doc'),
    expect: OPEN,
  },
];

type Create = components['schemas']['RestrictionCreate'];

async function run(row: Row) {
  const org = await t.factories.org();
  const roles = { R1: await t.factories.customRole(org.orgId, []), R2: await t.factories.customRole(org.orgId, []) };
  const me = await t.factories.member(org.orgId, { roles: ['member', ...(row.me?.roles ?? []).map((r) => roles[r])] });
  const other = await t.factories.member(org.orgId);
  const teams = {
    T1: await t.factories.team(org.orgId, 'T1', row.me?.teams?.includes('T1') ? [me] : []),
    T2: await t.factories.team(org.orgId, 'T2', row.me?.teams?.includes('T2') ? [me] : []),
  };
  const users = { me, other };
  const stool = newId('syntheticTool');
  await t.db
    .insertInto('synthetic_tools')
    .values({
      id: stool,
      org_id: org.orgId,
      name: 'S1',
      description: 'd',
      input_schema: '{}',
      output_schema: null,
      steps: '[]',
      output: '{}',
      created_by_user_id: null,
    })
    .execute();
  const admin = t.client({ token: org.token, org: org.orgId });
  const approver = t.client({ session: await t.factories.session(org.ownerId), org: org.orgId });
  const mine = t.client({ token: await t.factories.token(org.orgId, me), org: org.orgId });
  const now = new Date();
  const ids: string[] = [];
  for (const [i, spec] of row.restrictions.entries()) {
    const who = spec.who ?? 'everyone';
    const body: Create = {
      name: `r${i}`,
      effect: spec.effect,
      match: spec.match?.synthetic_tool ? { synthetic_tool_id: stool } : { connector_slug: spec.match?.connector_slug, tool_pattern: spec.match?.tool_pattern },
      applies_to:
        who === 'everyone'
          ? { everyone: true }
          : {
              role_ids: (who.roles ?? []).map((r) => roles[r]),
              team_ids: (who.teams ?? []).map((x) => teams[x]),
              user_ids: (who.users ?? []).map((u) => users[u]),
            },
    };
    const created = await admin.POST('/restriction', { body });
    if (!created.data) throw new Error(JSON.stringify(created.error));
    ids.push(created.data.id);
    for (const request of spec.requests ?? []) {
      const filed = await mine.POST('/access-request', {
        body: { restriction_id: created.data.id, connector_slug: request.connector_slug, tool_name: request.tool_name, reason: row.name },
      });
      if (!filed.data) throw new Error(JSON.stringify(filed.error));
      const path = { params: { path: { id: filed.data.id } } };
      if (request.outcome === 'approved') {
        const expires_at = request.expiresInMinutes === undefined ? null : new Date(now.getTime() + request.expiresInMinutes * 60_000).toISOString();
        expect((await approver.POST('/access-request/{id}/resolve', { ...path, body: { decision: 'approved', expires_at } })).response.status).toBe(200);
      } else if (request.outcome === 'denied') {
        expect((await approver.POST('/access-request/{id}/resolve', { ...path, body: { decision: 'denied' } })).response.status).toBe(200);
      } else if (request.outcome === 'withdrawn') {
        expect((await mine.POST('/access-request/{id}/withdraw', path)).response.status).toBe(200);
      }
    }
    if (spec.thenMatch) {
      const match = spec.thenMatch.synthetic_tool
        ? { synthetic_tool_id: stool }
        : { connector_slug: spec.thenMatch.connector_slug, tool_pattern: spec.thenMatch.tool_pattern };
      expect((await admin.PATCH('/restriction/{id}', { params: { path: { id: created.data.id } }, body: { match } })).response.status).toBe(200);
    }
    if (spec.active === false)
      expect((await admin.PATCH('/restriction/{id}', { params: { path: { id: created.data.id } }, body: { is_active: false } })).response.status).toBe(200);
  }
  const tool: ToolRef = row.tool.kind === 'synthetic' ? { ...row.tool, id: stool } : row.tool;
  const at = new Date(now.getTime() + (row.atMinutes ?? 0) * 60_000);
  const policy = await loadPolicy(t.db, await policySubjectOf(t.db, org.orgId, me), at);
  const verdict = policy.evaluate(tool);
  // The MCP endpoint's one-query loader judges the same.
  expect((await loadPolicyForMember(t.db, org.orgId, me, at)).evaluate(tool)).toEqual(verdict);
  return { verdict, ids };
}

it.each(TABLE.map((row) => [row.name, row] as const))('%s', async (_name, row) => {
  const { verdict, ids } = await run(row);
  expect(verdict).toEqual({
    listed: row.expect.listed,
    callable: row.expect.callable,
    deniedBy: (row.expect.denied ?? []).map((i) => ids[i]),
    heldBy: (row.expect.held ?? []).map((i) => ids[i]),
  });
});
