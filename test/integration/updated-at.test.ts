// `updated_at` moves when a change is made through the API, on every table the trigger
// (touch_updated_at) keeps it on: one case per table, each making its resource with the
// area's fixture and changing it with the area's own operation. The tables whose trigger names
// no bookkeeping columns never moved before the function took a missing argument list as empty
// (migration 2026_11_27_105018); test/db/updated-at.test.ts covers the tables no operation edits.
import { sql } from 'kysely';
import { startTestApp, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';
import { loadFixtureCreators } from '../support/fixtures';

let t: TestApp;
let org: SeededOrg;
let owner: ReturnType<TestApp['as']>;
const fixtures = loadFixtureCreators();

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  owner = t.as({ token: org.token, org: org.orgId });
});
afterAll(async () => {
  await t.close();
});

/** The row's `updated_at` in microseconds (as stored), found by the columns given. */
async function updatedAt(table: string, where: Record<string, string>): Promise<bigint> {
  const conditions = sql.join(
    Object.entries(where).map(([column, value]) => sql`${sql.ref(column)} = ${value}`),
    sql` and `,
  );
  const { rows } = await sql<{
    at: string;
  }>`select (extract(epoch from updated_at) * 1000000)::bigint::text as at from ${sql.table(table)} where ${conditions}`.execute(t.db);
  if (rows.length !== 1) throw new Error(`${table}: ${rows.length} rows for ${JSON.stringify(where)}`);
  return BigInt(rows[0]!.at);
}

interface Case {
  table: string;
  /** Makes the resource; answers the columns that find its row. */
  make: () => Promise<Record<string, string>>;
  /** Changes it through the API; answers the response status. */
  change: (row: Record<string, string>) => Promise<number>;
}

const byId = (fixture: string) => async () => ({ id: await fixtures[fixture]!(t, org) });
const unique = () => Math.random().toString(36).slice(2, 10);

const CASES: Case[] = [
  {
    table: 'teams',
    make: byId('TeamId'),
    change: async ({ id }) => (await owner.op('updateTeam', { params: { id: id! }, body: { name: `Renamed ${unique()}` } })).status,
  },
  {
    table: 'roles',
    make: byId('RoleId'),
    change: async ({ id }) => (await owner.op('updateRole', { params: { id: id! }, body: { name: `Renamed ${unique()}` } })).status,
  },
  {
    table: 'organizations',
    make: async () => ({ id: org.orgId }),
    change: async ({ id }) => (await owner.op('updateOrganization', { params: { id: id! }, body: { name: `Renamed ${unique()}` } })).status,
  },
  {
    table: 'templates',
    make: byId('TemplateId'),
    change: async ({ id }) => (await owner.op('updateTemplate', { params: { id: id! }, body: { name: `Renamed ${unique()}` } })).status,
  },
  {
    table: 'synthetic_tools',
    make: byId('SyntheticToolId'),
    change: async ({ id }) => (await owner.op('updateSyntheticTool', { params: { id: id! }, body: { description: 'Reworded.' } })).status,
  },
  {
    table: 'toolboxes',
    make: byId('ToolboxId'),
    change: async ({ id }) => (await owner.op('updateToolbox', { params: { id: id! }, body: { name: `Renamed ${unique()}` } })).status,
  },
  {
    table: 'user_toolboxes',
    make: byId('UserToolboxId'),
    change: async ({ id }) => (await owner.op('updateUserToolbox', { params: { id: id! }, body: { description: 'Reworded.' } })).status,
  },
  {
    table: 'restrictions',
    make: byId('RestrictionId'),
    change: async ({ id }) => (await owner.op('updateRestriction', { params: { id: id! }, body: { name: `Renamed ${unique()}` } })).status,
  },
  {
    table: 'access_requests',
    make: byId('AccessRequestId'),
    change: async ({ id }) => (await owner.op('withdrawAccessRequest', { params: { id: id! } })).status,
  },
  { table: 'invites', make: byId('InviteId'), change: async ({ id }) => (await owner.op('revokeInvite', { params: { id: id! } })).status },
  {
    table: 'connectors',
    make: async () => ({ org_id: org.orgId, slug: await fixtures.ConnectorSlug!(t, org) }),
    change: async ({ slug }) => (await owner.op('updateConnector', { params: { slug: slug! }, body: { description: 'Reworded.' } })).status,
  },
  {
    table: 'shares',
    make: async () => {
      const slug = await fixtures.ConnectorSlug!(t, org);
      const res = await owner.op('shareConnector', { params: { slug }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
      return { id: res.body.id as string, slug };
    },
    change: async ({ slug }) =>
      (await owner.op('shareConnector', { params: { slug: slug! }, body: { principal: { type: 'organization', id: org.orgId }, level: 'edit' } })).status,
  },
  {
    table: 'memberships',
    make: async () => ({ org_id: org.orgId, user_id: await t.factories.member(org.orgId) }),
    change: async ({ user_id }) => (await owner.op('updateMember', { params: { userId: user_id! }, body: { status: 'suspended' } })).status,
  },
];

describe.each(CASES)('$table', ({ table, make, change }) => {
  it('moves updated_at when the resource is changed through the API', async () => {
    const row = await make();
    const where = table === 'shares' ? { id: row.id! } : row;
    const before = await updatedAt(table, where);
    expect(await change(row)).toBe(200);
    const after = await updatedAt(table, where);
    expect(after > before).toBe(true);
  });
});
