import type { components } from '../../generated/openapi';
import { shareResource } from '../../src/access/shares';
import { newId } from '../../src/lib/ids';
import { settle, startTestApp, type ApiClient, type TestApp } from '../support/app';
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

function api(credential: { token?: string; session?: string; org?: string }) {
  const c: ApiClient = t.client(credential);
  const item = (id: string) => ({ params: { path: { id } } });
  return {
    raw: t.as(credential),
    list: (query: { limit?: number; cursor?: string; user_id?: string } = {}) => settle(c.GET('/team', { params: { query } })),
    create: (body: Schemas['TeamCreate']) => settle(c.POST('/team', { body })),
    read: (id: string) => settle(c.GET('/team/{id}', item(id))),
    update: (id: string, body: Schemas['TeamUpdate']) => settle(c.PATCH('/team/{id}', { ...item(id), body })),
    remove: (id: string) => settle(c.DELETE('/team/{id}', item(id))),
    members: (id: string, query: { limit?: number; cursor?: string } = {}) => settle(c.GET('/team/{id}/members', { params: { path: { id }, query } })),
    add: (id: string, userId: string) => settle(c.POST('/team/{id}/members', { ...item(id), body: { user_id: userId } })),
    take: (id: string, userId: string) => settle(c.DELETE('/team/{id}/members/{userId}', { params: { path: { id, userId } } })),
  };
}
const as = (seeded: SeededOrg) => api({ token: seeded.token, org: seeded.orgId });
const owner = () => as(org);
let n = 0;
const name = () => `Team ${++n} ${Math.random().toString(36).slice(2, 6)}`;

/** A member holding a custom role with these permissions, with a client of their token. */
async function holder(permissions: string[], seeded: SeededOrg = org) {
  const roleId = await t.factories.customRole(seeded.orgId, permissions);
  const userId = await t.factories.member(seeded.orgId, { roles: [roleId] });
  return { userId, api: api({ token: await t.factories.token(seeded.orgId, userId), org: seeded.orgId }) };
}

describe('createTeam', () => {
  it('creates an empty team: 201 with Location, created_by_user_id, audit entry', async () => {
    const res = await owner().create({ name: 'Platform', description: 'Runs the shared infrastructure.' });
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
    expect((await owner().create({ name: name() })).body.description).toBeNull();
  });

  it('409 name_taken without regard to case; another organization may use the name', async () => {
    await owner().create({ name: 'Contractors' });
    for (const taken of ['Contractors', 'contractors']) {
      const res = await owner().create({ name: taken });
      expect([res.status, res.body.code]).toEqual([409, 'name_taken']);
    }
    expect((await as(other).create({ name: 'Contractors' })).status).toBe(201);
  });

  it('400 validation_failed: missing, wrong type, unknown member, blank', async () => {
    for (const body of [{}, { name: 7 }, { name: 'X', colour: 'red' }, { name: ' ' }, { name: 'x'.repeat(101) }, { name: 'X', description: 5 }]) {
      const res = await owner().raw.post('/team', body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
    }
  });

  it('403 missing_permission without team:manage', async () => {
    const viewer = await holder(['team:view']);
    expect((await viewer.api.create({ name: name() })).body.code).toBe('missing_permission');
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
      const res = await as(seeded).list({ limit: 3, cursor });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((x: Team) => x.id));
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual(ids);
    const mine = await as(seeded).list({ user_id: p });
    expect(mine.body.data.map((x: Team) => [x.id, x.member_count])).toEqual([
      [ids[0], 1],
      [ids[3], 1],
      [ids[6], 1],
    ]);
  });

  it('getTeam answers the team with its member count', async () => {
    const a = await t.factories.member(org.orgId);
    const id = await t.factories.team(org.orgId, name(), [a, org.ownerId]);
    const res = await owner().read(id);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, member_count: 2 });
  });

  it('400 unknown_reference for a user_id that is not a member; 400 for bad parameters and cursors', async () => {
    const stranger = await t.factories.member(other.orgId);
    const res = await owner().list({ user_id: stranger });
    expect([res.status, res.body.code]).toEqual([400, 'unknown_reference']);
    expect(res.body.errors).toEqual([{ in: 'query', pointer: '/user_id', message: expect.any(String) }]);
    expect((await owner().raw.get('/team?user_id=nobody')).body.code).toBe('validation_failed');
    expect((await owner().raw.get('/team?limit=0')).body.code).toBe('validation_failed');
    expect((await owner().raw.get('/team?colour=red')).body.code).toBe('validation_failed');
    expect((await owner().raw.get(`/team?cursor=${Buffer.from(newId('role')).toString('base64url')}`)).body.code).toBe('invalid_cursor');
  });

  it('404 for another organization’s team or an unknown one; 400 malformed; 403 missing_permission', async () => {
    const theirs = await t.factories.team(other.orgId, name());
    expect([(await owner().read(theirs)).status, (await owner().read(theirs)).body.code]).toEqual([404, 'not_found']);
    expect((await owner().read(newId('team'))).status).toBe(404);
    expect((await owner().raw.get('/team/role_01jg3b7f0p3m6q9x2v5c8n1b4k')).body.code).toBe('validation_failed');
    const nobody = await holder(['member:view']);
    expect((await nobody.api.list()).body.code).toBe('missing_permission');
    expect((await nobody.api.read(theirs)).body.code).toBe('missing_permission');
  });
});

describe('updateTeam', () => {
  it('renames and clears the description; audit with before and after', async () => {
    const created = (await owner().create({ name: name(), description: 'Old' })).body;
    const res = await owner().update(created.id, { name: 'Platform engineering', description: null });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: created.id, name: 'Platform engineering', description: null, created_by_user_id: org.ownerId });
    const [audit] = (await t.factories.auditEntries(org.orgId, 'team.updated')).filter((a) => a.target_id === created.id);
    expect(audit!.changes).toEqual({ name: { from: created.name, to: 'Platform engineering' }, description: { from: 'Old', to: null } });
  });

  it('409 name_taken; 400 validation_failed; 404 for another organization’s team, unchanged; 403', async () => {
    const a = (await owner().create({ name: name() })).body;
    const b = (await owner().create({ name: name() })).body;
    expect((await owner().update(b.id, { name: a.name.toLowerCase() })).body.code).toBe('name_taken');
    for (const body of [{}, { name: '' }, { member_count: 3 }, { name: 1 }])
      expect((await owner().raw.patch(`/team/${a.id}`, body)).body.code).toBe('validation_failed');
    const theirs = await t.factories.team(other.orgId, 'Their team');
    expect((await owner().update(theirs, { name: 'Ours' })).status).toBe(404);
    expect((await as(other).read(theirs)).body.name).toBe('Their team');
    const viewer = await holder(['team:view']);
    expect((await viewer.api.update(a.id, { name: name() })).body.code).toBe('missing_permission');
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
    const res = await owner().remove(id);
    expect(res.status).toBe(204);
    expect(await t.db.selectFrom('team_members').select('user_id').where('team_id', '=', id).execute()).toEqual([]);
    expect(await t.db.selectFrom('shares').select('id').where('principal_id', '=', id).execute()).toEqual([]);
    const [audit] = (await t.factories.auditEntries(org.orgId, 'team.deleted')).filter((a) => a.target_id === id);
    expect(audit!.changes).toMatchObject({ member_count: 1 });
    expect((await owner().read(id)).status).toBe(404);
    expect((await owner().remove(id)).status).toBe(404);
    // The member is still a member of the organization.
    expect((await owner().raw.get(`/member/${p}`)).body.status).toBe('active');
  });

  it('409 team_in_use while a restriction names it', async () => {
    const id = await t.factories.team(org.orgId, name());
    const rst = await restriction(t, org, { applies_to: { team_ids: [id] } });
    const res = await owner().remove(id);
    expect([res.status, res.body.code]).toEqual([409, 'team_in_use']);
    expect(res.body.detail).toContain(rst);
    expect((await owner().read(id)).status).toBe(200);
  });

  it('404 for another organization’s team, which stays; 400; 403', async () => {
    const theirs = await t.factories.team(other.orgId, name());
    expect((await owner().remove(theirs)).status).toBe(404);
    expect((await as(other).read(theirs)).status).toBe(200);
    expect((await owner().raw.delete('/team/nope')).body.code).toBe('validation_failed');
    const viewer = await holder(['team:view']);
    expect((await viewer.api.remove(theirs)).body.code).toBe('missing_permission');
  });
});

describe('team members', () => {
  it('adds a member (201 with Location, added_by_user_id, audit), again is 200 with the entry and no audit; lists; removes', async () => {
    const id = await t.factories.team(org.orgId, name());
    const p = await t.factories.member(org.orgId);
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    const res = await owner().add(id, p);
    expect(res.status).toBe(201);
    expect(res.headers.get('location')).toBe(`/team/${id}/members/${p}`);
    expect(res.body).toMatchObject({ team_id: id, user: { id: p }, member_status: 'active', added_by_user_id: org.ownerId });
    const again = await owner().add(id, p);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(res.body);
    expect((await t.factories.auditEntries(org.orgId, 'team.member_added')).filter((a) => a.target_id === id)).toEqual([
      expect.objectContaining({ target_type: 'team', changes: { user_id: p } }),
    ]);
    expect((await owner().add(id, suspended)).body.member_status).toBe('suspended');
    const list = await owner().members(id);
    expect(list.status).toBe(200);
    expect(list.body.data.map((m: Schemas['TeamMember']) => m.user.id)).toEqual([p, suspended]);
    expect((await owner().read(id)).body.member_count).toBe(2);

    const removed = await owner().take(id, p);
    expect(removed.status).toBe(204);
    expect((await t.factories.auditEntries(org.orgId, 'team.member_removed')).filter((a) => a.target_id === id)).toEqual([
      expect.objectContaining({ changes: { user_id: p } }),
    ]);
    expect((await owner().take(id, p)).status).toBe(404);
    expect((await owner().members(id)).body.data.map((m: Schemas['TeamMember']) => m.user.id)).toEqual([suspended]);
  });

  it('a member’s teams follow additions and removals at once', async () => {
    const seeded = await t.factories.org();
    const viewer = await holder(['team:view'], seeded);
    const id = await t.factories.team(seeded.orgId, name());
    expect((await as(seeded).add(id, viewer.userId)).status).toBe(201);
    expect((await viewer.api.list({ user_id: viewer.userId })).body.data.map((x: Team) => x.id)).toEqual([id]);
    expect((await as(seeded).take(id, viewer.userId)).status).toBe(204);
    expect((await viewer.api.list({ user_id: viewer.userId })).body.data).toEqual([]);
  });

  it('400 unknown_reference for someone not a member (another organization’s, removed, nobody)', async () => {
    const id = await t.factories.team(org.orgId, name());
    const removed = await t.factories.member(org.orgId, { status: 'removed', roles: [] });
    for (const userId of [await t.factories.member(other.orgId), removed, newId('user')]) {
      const res = await owner().add(id, userId);
      expect([res.status, res.body.code]).toEqual([400, 'unknown_reference']);
      expect(res.body.errors).toEqual([{ in: 'body', pointer: '/user_id', message: expect.any(String) }]);
    }
    for (const body of [{}, { user_id: 'x' }, { user_id: org.ownerId, role: 'lead' }])
      expect((await owner().raw.post(`/team/${id}/members`, body)).body.code).toBe('validation_failed');
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
    for (const u of users.slice(4)) expect((await as(seeded).add(id, u)).status).toBe(201);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await as(seeded).members(id, { limit: 3, cursor });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((m: Schemas['TeamMember']) => m.user.id));
      cursor = res.body.next_cursor ?? undefined;
    } while (cursor);
    expect(seen).toEqual([...users.slice(0, 4).sort(), ...users.slice(4)]);
    expect((await as(seeded).raw.get(`/team/${id}/members?cursor=${Buffer.from(newId('team')).toString('base64url')}`)).body.code).toBe('invalid_cursor');
  });

  it('404 for another organization’s team (its members unchanged); 403 missing_permission', async () => {
    const theirs = await t.factories.team(other.orgId, name(), [other.ownerId]);
    const mine = await t.factories.member(org.orgId);
    expect((await owner().members(theirs)).status).toBe(404);
    expect((await owner().add(theirs, mine)).status).toBe(404);
    expect((await owner().take(theirs, other.ownerId)).status).toBe(404);
    expect((await as(other).read(theirs)).body.member_count).toBe(1);
    const viewer = await holder(['team:view']);
    const id = await t.factories.team(org.orgId, name());
    expect((await viewer.api.members(id)).status).toBe(200);
    expect((await viewer.api.add(id, mine)).body.code).toBe('missing_permission');
    expect((await viewer.api.take(id, mine)).body.code).toBe('missing_permission');
    const nobody = await holder(['member:view']);
    expect((await nobody.api.members(id)).body.code).toBe('missing_permission');
  });
});
