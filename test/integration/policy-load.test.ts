import { restrictionsNaming } from '../../src/areas/restrictions/restrictions.repo';
import { newId } from '../../src/lib/ids';
import { loadPolicy, loadPolicyForMember, policySubjectOf } from '../../src/access/policy';
import { startTestApp, type TestApp } from '../support/app';

/*
 * Policy.load and Policy.subjectOf on the database (rows written directly): which
 * restrictions apply (everyone, role, team, user; inactive ones not), which access
 * requests are live exceptions (approved, unexpired, the member's own).
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

it('loads the active restrictions applying to the member and their live exceptions', async () => {
  const org = await t.factories.org();
  const other = await t.factories.org();
  const roleId = await t.factories.customRole(org.orgId, []);
  const userId = await t.factories.member(org.orgId, { roles: ['member', roleId] });
  const teamId = await t.factories.team(org.orgId, 'Ops', [userId]);
  const bystander = await t.factories.member(org.orgId);
  const rst = async (
    orgId: string,
    name: string,
    who: { everyone?: boolean; roles?: string[]; teams?: string[]; users?: string[] },
    extra: { active?: boolean; effect?: 'deny' | 'require_approval'; pattern?: string } = {},
  ) => {
    const id = newId('restriction');
    await t.db
      .insertInto('restrictions')
      .values({
        id,
        org_id: orgId,
        name,
        description: null,
        match_connector_slug: 'github',
        match_tool_pattern: extra.pattern ?? 'delete_*',
        match_synthetic_tool_id: null,
        effect: extra.effect ?? 'require_approval',
        applies_to_everyone: who.everyone ?? false,
        applies_to_role_ids: who.roles ?? [],
        applies_to_team_ids: who.teams ?? [],
        applies_to_user_ids: who.users ?? [],
        is_active: extra.active ?? true,
        created_by_user_id: null,
      })
      .execute();
    return id;
  };
  const everyone = await rst(org.orgId, 'everyone', { everyone: true });
  const byRole = await rst(org.orgId, 'role', { roles: [roleId] });
  const byTeam = await rst(org.orgId, 'team', { teams: [teamId] });
  const byUser = await rst(org.orgId, 'user', { users: [userId] });
  await rst(org.orgId, 'someone else', { users: [bystander] });
  await rst(org.orgId, 'inactive', { everyone: true }, { active: false });
  await rst(other.orgId, 'other org', { everyone: true });
  const now = new Date();
  const areq = async (restrictionId: string, requester: string, status: 'approved' | 'pending', expires: Date | null) =>
    t.db
      .insertInto('access_requests')
      .values({
        id: newId('accessRequest'),
        org_id: org.orgId,
        requester_user_id: requester,
        restriction_id: restrictionId,
        connector_slug: null,
        tool_name: null,
        synthetic_tool_id: null,
        reason: 'r',
        status,
        exception_expires_at: expires,
      })
      .execute();
  await areq(everyone, userId, 'approved', null);
  await areq(byRole, userId, 'approved', new Date(now.getTime() - 1000)); // expired
  await areq(byTeam, userId, 'pending', null);
  await areq(byUser, bystander, 'approved', null); // someone else's

  const subject = await policySubjectOf(t.db, org.orgId, userId);
  expect([...subject.roleIds].sort()).toEqual([roleId, org.roleIds.member].sort());
  expect(subject.teamIds).toEqual([teamId]);
  const policy = await loadPolicy(t.db, subject, now);
  expect(policy.restrictionIds).toEqual([everyone, byRole, byTeam, byUser]);
  expect(policy.evaluate({ kind: 'upstream', connector_slug: 'github', tool: 'delete_repo' })).toEqual({
    listed: true,
    callable: false,
    deniedBy: [],
    heldBy: [byRole, byTeam, byUser],
  });
  // The MCP endpoint's one-query form reads the same subject, restrictions and exceptions.
  const member = await loadPolicyForMember(t.db, org.orgId, userId, now);
  expect([...member.subject.roleIds].sort()).toEqual([...subject.roleIds].sort());
  expect(member.subject.teamIds).toEqual([teamId]);
  expect(member.restrictionIds).toEqual(policy.restrictionIds);
  expect(member.evaluate({ kind: 'upstream', connector_slug: 'github', tool: 'delete_repo' })).toEqual(
    policy.evaluate({ kind: 'upstream', connector_slug: 'github', tool: 'delete_repo' }),
  );
  const none = await loadPolicyForMember(t.db, other.orgId, bystander, now);
  expect(none.subject).toEqual({ orgId: other.orgId, userId: bystander, roleIds: [], teamIds: [] });
  expect(none.restrictionIds).toHaveLength(1);

  // No roles and no teams: only `everyone` and the user's own.
  const bare = await loadPolicy(t.db, { orgId: org.orgId, userId, roleIds: [], teamIds: [] }, now);
  expect(bare.restrictionIds).toEqual([everyone, byUser]);
});

it('restrictionsNaming finds the restrictions that name a synthetic tool, a role or a team', async () => {
  const org = await t.factories.org();
  const roleId = await t.factories.customRole(org.orgId, []);
  const teamId = await t.factories.team(org.orgId, 'Named');
  const stool = newId('syntheticTool');
  await t.db
    .insertInto('synthetic_tools')
    .values({
      id: stool,
      org_id: org.orgId,
      name: 'S',
      description: 'd',
      input_schema: '{}',
      output_schema: null,
      steps: '[]',
      output: '{}',
      created_by_user_id: null,
    })
    .execute();
  const as = t.as({ token: org.token, org: org.orgId });
  const a = (await as.post('/restriction', { name: 'a', effect: 'deny', match: { synthetic_tool_id: stool }, applies_to: { role_ids: [roleId] } })).body.id;
  const b = (await as.post('/restriction', { name: 'b', effect: 'deny', applies_to: { role_ids: [roleId], team_ids: [teamId] } })).body.id;
  expect(await restrictionsNaming(t.db, org.orgId, { syntheticToolId: stool })).toEqual([a]);
  expect(await restrictionsNaming(t.db, org.orgId, { roleId })).toEqual([a, b]);
  expect(await restrictionsNaming(t.db, org.orgId, { teamId })).toEqual([b]);
  expect(await restrictionsNaming(t.db, org.orgId, { teamId: newId('team') })).toEqual([]);
});
