import type { components } from '../../generated/openapi';
import { shareResource } from '../../src/access/shares';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import type { SeededOrg } from '../support/factories';
import { restriction } from '../fixtures/restrictions';

/*
 * The eight Teams operations over HTTP against the real app on a fresh database; every
 * response is checked against the spec. Teams emit no events.
 */

type Schemas = components['schemas'];
type Team = Schemas['Team'];
const TEAM = /^team_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

let t: TestApp;
let org: SeededOrg;
let other: SeededOrg;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  other = await t.factories.org();
});
afterAll(async () => {
  await t.close();
});

let n = 0;
const name = () => `Team ${++n} ${Math.random().toString(36).slice(2, 6)}`;

/** A member holding a custom role with these permissions, as a caller (their token). */
async function holder(permissions: string[], seeded: SeededOrg = org) {
  const roleId = await t.factories.customRole(seeded.orgId, permissions);
  const userId = await t.factories.member(seeded.orgId, { roles: [roleId] });
  return { userId, token: await t.factories.token(seeded.orgId, userId), org: seeded.orgId };
}

describe('createTeam', () => {
  it('creates an empty team: 201 with Location, created_by_user_id, audit entry', async () => {
    const res = await t.as(org).op('createTeam', { body: { name: 'Platform', description: 'Runs the shared infrastructure.' } });
    expect(res.status).toBe(201);
    expect(res.body.id).toMatch(TEAM);
    expect(res.headers.get('location')).toBe(`/team/${res.body.id}`);
    expect(res.body).toMatchObject({ name: 'Platform', description: 'Runs the shared infrastructure.', member_count: 0, created_by_user_id: org.ownerId });
    const [audit] = (await t.factories.auditEntries(org.orgId, 'team.created')).filter((a) => a.target_id === res.body.id);
    expect(audit).toMatchObject({
      target_type: 'team',
      actor_type: 'api_token',
      changes: { name: 'Platform', description: 'Runs the shared infrastructure.' },
    });
    expect((await t.as(org).op('createTeam', { body: { name: name() } })).body.description).toBeNull();
  });

  it('409 name_taken without regard to case; another organization may use the name', async () => {
    await t.as(org).op('createTeam', { body: { name: 'Contractors' } });
    for (const taken of ['Contractors', 'contractors']) {
      const res = await t.as(org).op('createTeam', { body: { name: taken } });
      expectError(res, 409, 'name_taken');
    }
    expect((await t.as(other).op('createTeam', { body: { name: 'Contractors' } })).status).toBe(201);
  });

  it('400 validation_failed: missing, wrong type, unknown member, blank', async () => {
    for (const body of [{}, { name: 7 }, { name: 'X', colour: 'red' }, { name: ' ' }, { name: 'x'.repeat(101) }, { name: 'X', description: 5 }]) {
      const res = await t.as(org).post('/team', body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
    }
  });

  it('403 missing_permission without team:manage', async () => {
    const viewer = await holder(['team:view']);
    expect((await t.as(viewer).op('createTeam', { body: { name: name() } })).error?.code).toBe('missing_permission');
  });
});

describe('listTeams and getTeam', () => {
  it('lists teams oldest first with member counts; filters by member; walks every page once', async () => {
    const seeded = await t.factories.org();
    const p = await t.factories.member(seeded.orgId);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push(await t.factories.team(seeded.orgId, `Walk ${i}`, i % 3 === 0 ? [p] : []));
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await t.as(seeded).op('listTeams', { query: { limit: 3, cursor } });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((x: Team) => x.id));
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(ids);
    const mine = await t.as(seeded).op('listTeams', { query: { user_id: p } });
    expect(mine.body.data.map((x: Team) => [x.id, x.member_count])).toEqual([
      [ids[0], 1],
      [ids[3], 1],
      [ids[6], 1],
    ]);
  });

  it('getTeam answers the team with its member count', async () => {
    const a = await t.factories.member(org.orgId);
    const id = await t.factories.team(org.orgId, name(), [a, org.ownerId]);
    const res = await t.as(org).op('getTeam', { params: { id } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, member_count: 2 });
  });

  it('400 unknown_reference for a user_id that is not a member; 400 for bad parameters and cursors', async () => {
    const stranger = await t.factories.member(other.orgId);
    const res = await t.as(org).op('listTeams', { query: { user_id: stranger } });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors).toEqual([{ in: 'query', pointer: '/user_id', message: expect.any(String) }]);
    expect((await t.as(org).get('/team?user_id=nobody')).body.code).toBe('validation_failed');
    expect((await t.as(org).get('/team?limit=0')).body.code).toBe('validation_failed');
    expect((await t.as(org).get('/team?colour=red')).body.code).toBe('validation_failed');
    expect((await t.as(org).op('listTeams', { query: { cursor: Buffer.from(newId('role')).toString('base64url') } })).error?.code).toBe('invalid_cursor');
  });

  it('404 for another organization’s team or an unknown one; 400 malformed; 403 missing_permission', async () => {
    const theirs = await t.factories.team(other.orgId, name());
    expectError(await t.as(org).op('getTeam', { params: { id: theirs } }), 404, 'not_found');
    expect((await t.as(org).op('getTeam', { params: { id: newId('team') } })).status).toBe(404);
    expect((await t.as(org).get('/team/role_01jg3b7f0p3m6q9x2v5c8n1b4k')).body.code).toBe('validation_failed');
    const nobody = await holder(['member:view']);
    expect((await t.as(nobody).op('listTeams')).error?.code).toBe('missing_permission');
    expect((await t.as(nobody).op('getTeam', { params: { id: theirs } })).error?.code).toBe('missing_permission');
  });
});

describe('updateTeam', () => {
  it('renames and clears the description; audit with before and after', async () => {
    const created = (await t.as(org).op('createTeam', { body: { name: name(), description: 'Old' } })).body;
    const res = await t.as(org).op('updateTeam', { params: { id: created.id }, body: { name: 'Platform engineering', description: null } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: created.id, name: 'Platform engineering', description: null, created_by_user_id: org.ownerId });
    const [audit] = (await t.factories.auditEntries(org.orgId, 'team.updated')).filter((a) => a.target_id === created.id);
    expect(audit!.changes).toEqual({ name: { from: created.name, to: 'Platform engineering' }, description: { from: 'Old', to: null } });
  });

  it('409 name_taken; 400 validation_failed; 404 for another organization’s team, unchanged; 403', async () => {
    const a = (await t.as(org).op('createTeam', { body: { name: name() } })).body;
    const b = (await t.as(org).op('createTeam', { body: { name: name() } })).body;
    expect((await t.as(org).op('updateTeam', { params: { id: b.id }, body: { name: a.name.toLowerCase() } })).error?.code).toBe('name_taken');
    for (const body of [{}, { name: '' }, { member_count: 3 }, { name: 1 }])
      expect((await t.as(org).patch(`/team/${a.id}`, body)).body.code).toBe('validation_failed');
    const theirs = await t.factories.team(other.orgId, 'Their team');
    expect((await t.as(org).op('updateTeam', { params: { id: theirs }, body: { name: 'Ours' } })).status).toBe(404);
    expect((await t.as(other).op('getTeam', { params: { id: theirs } })).body.name).toBe('Their team');
    const viewer = await holder(['team:view']);
    expect((await t.as(viewer).op('updateTeam', { params: { id: a.id }, body: { name: name() } })).error?.code).toBe('missing_permission');
  });
});

describe('deleteTeam', () => {
  it('deletes the team with its memberships and the shares granted to it: 204, audit; then 404', async () => {
    const p = await t.factories.member(org.orgId);
    const id = await t.factories.team(org.orgId, name(), [p]);
    await shareResource(t.db, {
      orgId: org.orgId,
      resourceType: 'connector',
      resourceId: 'tickets-demo',
      share: { principal: { type: 'team', id }, level: 'use' },
      byUserId: null,
    });
    const res = await t.as(org).op('deleteTeam', { params: { id } });
    expect(res.status).toBe(204);
    expect(await t.db.selectFrom('team_members').select('user_id').where('team_id', '=', id).execute()).toEqual([]);
    expect(await t.db.selectFrom('shares').select('id').where('principal_id', '=', id).execute()).toEqual([]);
    const [audit] = (await t.factories.auditEntries(org.orgId, 'team.deleted')).filter((a) => a.target_id === id);
    expect(audit!.changes).toMatchObject({ member_count: 1 });
    expect((await t.as(org).op('getTeam', { params: { id } })).status).toBe(404);
    expect((await t.as(org).op('deleteTeam', { params: { id } })).status).toBe(404);
    // The member is still a member of the organization.
    expect((await t.as(org).op('getMember', { params: { userId: p } })).body.status).toBe('active');
  });

  it('409 team_in_use while a restriction names it', async () => {
    const id = await t.factories.team(org.orgId, name());
    const rst = await restriction(t, org, { applies_to: { team_ids: [id] } });
    const res = await t.as(org).op('deleteTeam', { params: { id } });
    expectError(res, 409, 'team_in_use');
    expect(res.error?.detail).toContain(rst);
    expect((await t.as(org).op('getTeam', { params: { id } })).status).toBe(200);
  });

  it('404 for another organization’s team, which stays; 400; 403', async () => {
    const theirs = await t.factories.team(other.orgId, name());
    expect((await t.as(org).op('deleteTeam', { params: { id: theirs } })).status).toBe(404);
    expect((await t.as(other).op('getTeam', { params: { id: theirs } })).status).toBe(200);
    expect((await t.as(org).delete('/team/nope')).body.code).toBe('validation_failed');
    const viewer = await holder(['team:view']);
    expect((await t.as(viewer).op('deleteTeam', { params: { id: theirs } })).error?.code).toBe('missing_permission');
  });
});

describe('team members', () => {
  it('adds a member (201 with Location, added_by_user_id, audit), again is 200 with the entry and no audit; lists; removes', async () => {
    const id = await t.factories.team(org.orgId, name());
    const p = await t.factories.member(org.orgId);
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    const res = await t.as(org).op('addTeamMember', { params: { id }, body: { user_id: p } });
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/team/${id}/members/${p}`);
    expect(res.body).toMatchObject({ team_id: id, user: { id: p }, member_status: 'active', added_by_user_id: org.ownerId });
    const again = await t.as(org).op('addTeamMember', { params: { id }, body: { user_id: p } });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(res.body);
    expect((await t.factories.auditEntries(org.orgId, 'team.member_added')).filter((a) => a.target_id === id)).toEqual([
      expect.objectContaining({ target_type: 'team', changes: { user_id: p } }),
    ]);
    expect((await t.as(org).op('addTeamMember', { params: { id }, body: { user_id: suspended } })).body.member_status).toBe('suspended');
    const list = await t.as(org).op('listTeamMembers', { params: { id } });
    expect(list.status).toBe(200);
    expect(list.body.data.map((m: Schemas['TeamMember']) => m.user.id)).toEqual([p, suspended]);
    expect((await t.as(org).op('getTeam', { params: { id } })).body.member_count).toBe(2);

    const removed = await t.as(org).op('removeTeamMember', { params: { id, userId: p } });
    expect(removed.status).toBe(204);
    expect((await t.factories.auditEntries(org.orgId, 'team.member_removed')).filter((a) => a.target_id === id)).toEqual([
      expect.objectContaining({ changes: { user_id: p } }),
    ]);
    expect((await t.as(org).op('removeTeamMember', { params: { id, userId: p } })).status).toBe(404);
    expect((await t.as(org).op('listTeamMembers', { params: { id } })).body.data.map((m: Schemas['TeamMember']) => m.user.id)).toEqual([suspended]);
  });

  it('a member’s teams follow additions and removals at once', async () => {
    const seeded = await t.factories.org();
    const viewer = await holder(['team:view'], seeded);
    const id = await t.factories.team(seeded.orgId, name());
    expect((await t.as(seeded).op('addTeamMember', { params: { id }, body: { user_id: viewer.userId } })).status).toBe(201);
    expect((await t.as(viewer).op('listTeams', { query: { user_id: viewer.userId } })).body.data.map((x: Team) => x.id)).toEqual([id]);
    expect((await t.as(seeded).op('removeTeamMember', { params: { id, userId: viewer.userId } })).status).toBe(204);
    expect((await t.as(viewer).op('listTeams', { query: { user_id: viewer.userId } })).body.data).toEqual([]);
  });

  it('400 unknown_reference for someone not a member (another organization’s, removed, nobody)', async () => {
    const id = await t.factories.team(org.orgId, name());
    const removed = await t.factories.member(org.orgId, { status: 'removed', roles: [] });
    for (const userId of [await t.factories.member(other.orgId), removed, newId('user')]) {
      const res = await t.as(org).op('addTeamMember', { params: { id }, body: { user_id: userId } });
      expectError(res, 400, 'unknown_reference');
      expect(res.error?.errors).toEqual([{ in: 'body', pointer: '/user_id', message: expect.any(String) }]);
    }
    for (const body of [{}, { user_id: 'x' }, { user_id: org.ownerId, role: 'lead' }])
      expect((await t.as(org).post(`/team/${id}/members`, body)).body.code).toBe('validation_failed');
  });

  it('walks a team’s members page by page, each once, in the order they were added (ties by user id)', async () => {
    const seeded = await t.factories.org();
    const id = await t.factories.team(seeded.orgId, name());
    const users: string[] = [];
    for (let i = 0; i < 7; i++) users.push(await t.factories.member(seeded.orgId));
    // Four added in one statement share added_at.
    await t.db
      .insertInto('team_members')
      .values(users.slice(0, 4).map((user_id) => ({ team_id: id, org_id: seeded.orgId, user_id })))
      .execute();
    for (const u of users.slice(4)) expect((await t.as(seeded).op('addTeamMember', { params: { id }, body: { user_id: u } })).status).toBe(201);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await t.as(seeded).op('listTeamMembers', { params: { id }, query: { limit: 3, cursor } });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((m: Schemas['TeamMember']) => m.user.id));
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual([...users.slice(0, 4).sort(), ...users.slice(4)]);
    expect(
      (await t.as(seeded).op('listTeamMembers', { params: { id }, query: { cursor: Buffer.from(newId('team')).toString('base64url') } })).error?.code,
    ).toBe('invalid_cursor');
  });

  it('404 for another organization’s team (its members unchanged); 403 missing_permission', async () => {
    const theirs = await t.factories.team(other.orgId, name(), [other.ownerId]);
    const mine = await t.factories.member(org.orgId);
    expect((await t.as(org).op('listTeamMembers', { params: { id: theirs } })).status).toBe(404);
    expect((await t.as(org).op('addTeamMember', { params: { id: theirs }, body: { user_id: mine } })).status).toBe(404);
    expect((await t.as(org).op('removeTeamMember', { params: { id: theirs, userId: other.ownerId } })).status).toBe(404);
    expect((await t.as(other).op('getTeam', { params: { id: theirs } })).body.member_count).toBe(1);
    const viewer = await holder(['team:view']);
    const id = await t.factories.team(org.orgId, name());
    expect((await t.as(viewer).op('listTeamMembers', { params: { id } })).status).toBe(200);
    expect((await t.as(viewer).op('addTeamMember', { params: { id }, body: { user_id: mine } })).error?.code).toBe('missing_permission');
    expect((await t.as(viewer).op('removeTeamMember', { params: { id, userId: mine } })).error?.code).toBe('missing_permission');
    const nobody = await holder(['member:view']);
    expect((await t.as(nobody).op('listTeamMembers', { params: { id } })).error?.code).toBe('missing_permission');
  });
});
