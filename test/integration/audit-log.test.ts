import { randomBytes } from 'node:crypto';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';

/*
 * The two audit-log operations over HTTP against the real app: entries written by real
 * operations, and entries written straight into the table where a test needs their time.
 */

let t: TestApp;
let org: SeededOrg;
let other: SeededOrg;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  other = await t.factories.org();
});
afterAll(() => t.close());

const unique = () => randomBytes(4).toString('hex');
const as = (o: SeededOrg) => t.as({ token: o.token, org: o.orgId });

/** Entries written directly, `minutesAgo` each (in order), all with the given action and target. */
async function entries(
  orgId: string,
  minutesAgo: number[],
  fields: { action?: string; target_type?: string; target_id?: string; actor_user_id?: string | null } = {},
) {
  const ids: string[] = [];
  for (const minutes of minutesAgo) {
    const id = newId('auditEvent');
    ids.push(id);
    await t.db
      .insertInto('audit_log')
      .values({
        id,
        org_id: orgId,
        actor_type: 'system',
        actor_id: null,
        actor_user_id: fields.actor_user_id ?? null,
        action: fields.action ?? 'team.created',
        target_type: fields.target_type ?? 'team',
        target_id: fields.target_id ?? newId('team'),
        changes: JSON.stringify({ minutes }),
        ip: null,
        user_agent: null,
        request_id: null,
        created_at: new Date(Date.now() - minutes * 60_000),
      })
      .execute();
  }
  return ids;
}

async function walk(o: SeededOrg, query: string, limit = 2): Promise<string[]> {
  const seen: string[] = [];
  let cursor: string | null = null;
  do {
    const res: any = await as(o).get(`/audit-log?limit=${limit}${query ? `&${query}` : ''}${cursor ? `&cursor=${cursor}` : ''}`);
    expect(res.status).toBe(200);
    expect(res.body.data.length).toBeLessThanOrEqual(limit);
    seen.push(...res.body.data.map((e: any) => e.id));
    cursor = res.body.next_cursor;
  } while (cursor);
  return seen;
}

describe('listAuditEvents', () => {
  it('shows what operations wrote, newest first, with actor, target, changes and request facts', async () => {
    const fresh = await t.factories.org();
    const session = await t.factories.session(fresh.ownerId);
    const tokenId = await t.factories.tokenId(fresh.token);
    const email = (await t.db.selectFrom('users').select('email').where('id', '=', fresh.ownerId).executeTakeFirstOrThrow()).email;
    const byToken = await as(fresh).post('/invite', { email: `a-${unique()}@acme.example` }, { headers: { 'user-agent': 'acme-deploy/2.3' } });
    const bySession = await t.as({ session, org: fresh.orgId }).post('/invite', { email: `b-${unique()}@acme.example` });
    const res = await as(fresh).get('/audit-log');
    expect(res.status).toBe(200);
    const [second, first] = res.body.data;
    expect(first).toMatchObject({
      id: expect.stringMatching(/^aud_/),
      action: 'invite.created',
      target: { type: 'invite', id: byToken.body.id },
      actor: { type: 'api_token', id: tokenId, user_id: fresh.ownerId, display: expect.stringContaining(`(${email})`) },
      user_agent: 'acme-deploy/2.3',
      request_id: byToken.headers.get('x-request-id'),
      ip: expect.any(String),
      changes: { email: byToken.body.email },
    });
    expect(second).toMatchObject({
      action: 'invite.created',
      target: { id: bySession.body.id },
      actor: { type: 'user', id: fresh.ownerId, user_id: fresh.ownerId, display: email },
    });
    // Reading the log is not itself audited.
    expect((await as(fresh).get('/audit-log')).body.data).toHaveLength(2);
  });

  it('walks every page once, newest first, and keeps its place while new entries arrive', async () => {
    const fresh = await t.factories.org();
    const ids = await entries(fresh.orgId, [50, 40, 30, 20, 10]);
    expect(await walk(fresh, '')).toEqual([...ids].reverse());

    const page1: any = await as(fresh).get('/audit-log?limit=2');
    await entries(fresh.orgId, [0]);
    const page2: any = await as(fresh).get(`/audit-log?limit=2&cursor=${page1.body.next_cursor}`);
    const page3: any = await as(fresh).get(`/audit-log?limit=2&cursor=${page2.body.next_cursor}`);
    expect([...page1.body.data, ...page2.body.data, ...page3.body.data].map((e: any) => e.id)).toEqual([...ids].reverse());
    expect(page3.body.next_cursor).toBeNull();
  });

  it('orders entries of the same instant by id', async () => {
    const fresh = await t.factories.org();
    const at = new Date(Date.now() - 5 * 60_000);
    const ids = [newId('auditEvent'), newId('auditEvent'), newId('auditEvent')];
    for (const id of ids) {
      await t.db
        .insertInto('audit_log')
        .values({ id, org_id: fresh.orgId, actor_type: 'system', action: 'role.created', target_type: 'role', target_id: null, created_at: at })
        .execute();
    }
    expect(await walk(fresh, '', 1)).toEqual([...ids].reverse());
  });

  it('filters by actor (a user id covers their tokens), action or action family, target and time range; filters combine', async () => {
    const fresh = await t.factories.org();
    const userId = await t.factories.member(fresh.orgId, { roles: ['admin'] });
    const userToken = await t.factories.token(fresh.orgId, userId);
    const userTokenId = await t.factories.tokenId(userToken);
    const viaToken = await t.as({ token: userToken, org: fresh.orgId }).post('/invite', { email: `c-${unique()}@acme.example` });
    const viaSession = await t.as({ session: await t.factories.session(userId), org: fresh.orgId }).post('/invite', { email: `d-${unique()}@acme.example` });
    await t.as({ session: await t.factories.session(userId), org: fresh.orgId }).post(`/invite/${viaSession.body.id}/revoke`);
    const teamId = newId('team');
    const old = await entries(fresh.orgId, [120, 90], { action: 'team.created', target_type: 'team', target_id: teamId });
    const recent = await entries(fresh.orgId, [30], { action: 'team.member_added', target_type: 'team', target_id: teamId });

    const list = async (query: string) => (await as(fresh).get(`/audit-log?limit=200&${query}`)).body.data.map((e: any) => e.id as string);
    const all = (await as(fresh).get('/audit-log?limit=200')).body.data;
    const idOf = (action: string, target: string) => all.find((e: any) => e.action === action && e.target?.id === target).id;
    const tokenCreated = idOf('invite.created', viaToken.body.id);
    const sessionCreated = idOf('invite.created', viaSession.body.id);
    const revoked = idOf('invite.revoked', viaSession.body.id);

    expect(await list(`actor_id=${userId}`)).toEqual([revoked, sessionCreated, tokenCreated]);
    expect(await list(`actor_id=${userTokenId}`)).toEqual([tokenCreated]);
    expect(await list('actor_type=api_token')).toEqual([tokenCreated]);
    expect(await list(`actor_type=user&actor_id=${userId}`)).toEqual([revoked, sessionCreated]);
    expect(await list('action=invite.revoked')).toEqual([revoked]);
    expect(await list('action=invite.*')).toEqual([revoked, sessionCreated, tokenCreated]);
    expect(await list('action=team.*')).toEqual([recent[0], old[1], old[0]]);
    expect(await list('target_type=team')).toEqual([recent[0], old[1], old[0]]);
    expect(await list(`target_id=${teamId}&action=team.created`)).toEqual([old[1], old[0]]);
    const since = new Date(Date.now() - 100 * 60_000).toISOString();
    const until = new Date(Date.now() - 60 * 60_000).toISOString();
    expect(await list(`since=${since}&until=${until}`)).toEqual([old[1]]);
    expect(await list(`target_type=team&since=${since}`)).toEqual([recent[0], old[1]]);
    expect(await walk(fresh, `action=team.*`, 1)).toEqual([recent[0], old[1], old[0]]);
  });

  it('400 for since not before until, malformed filters, unknown parameters and a cursor of other filters', async () => {
    const now = new Date().toISOString();
    const since = await as(org).get(`/audit-log?since=${now}&until=${now}`);
    expect([since.status, since.body.code, since.body.errors[0].pointer]).toEqual([400, 'validation_failed', '/since']);
    // A leap second is RFC 3339 but no JavaScript Date: refused like any other bad time.
    for (const query of [
      'action=team',
      'action=Team.created',
      'actor_type=robot',
      'actor_id=ada',
      'since=yesterday',
      'since=2026-12-31T23:59:60Z',
      'until=2026-12-31T23:59:60Z',
      'limit=201',
      'colour=red',
      'target_type=Team',
    ]) {
      const res = await as(org).get(`/audit-log?${query}`);
      expect([query, res.status, res.body.code]).toEqual([query, 400, 'validation_failed']);
    }
    await entries(org.orgId, [3, 2, 1]);
    const page = await as(org).get('/audit-log?limit=1&action=team.created');
    const otherFilters = await as(org).get(`/audit-log?limit=1&action=team.*&cursor=${page.body.next_cursor}`);
    expect([otherFilters.status, otherFilters.body.code]).toEqual([400, 'invalid_cursor']);
    const garbage = await as(org).get('/audit-log?cursor=bm9wZQ');
    expect([garbage.status, garbage.body.code]).toEqual([400, 'invalid_cursor']);
  });

  it('shows only this organization’s entries, within the plan’s retention', async () => {
    const fresh = await t.factories.org();
    const [mine] = await entries(fresh.orgId, [1]);
    const [theirs] = await entries(other.orgId, [1]);
    const [ancient] = await entries(fresh.orgId, [91 * 24 * 60]);
    const listed = await walk(fresh, '', 50);
    expect(listed).toContain(mine);
    expect(listed).not.toContain(theirs);
    expect(listed).not.toContain(ancient);
    expect((await as(fresh).get(`/audit-log/${ancient}`)).status).toBe(404);
    await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', fresh.orgId).execute();
    expect(await walk(fresh, '', 50)).toContain(ancient);
  });

  it('403 missing_permission without audit_log:view (an Auditor has it)', async () => {
    const memberId = await t.factories.member(org.orgId, { roles: ['member'] });
    const res = await t.as({ session: await t.factories.session(memberId), org: org.orgId }).get('/audit-log');
    expect([res.status, res.body.code]).toEqual([403, 'missing_permission']);
    const auditorId = await t.factories.member(org.orgId, { roles: ['auditor'] });
    expect((await t.as({ session: await t.factories.session(auditorId), org: org.orgId }).get('/audit-log')).status).toBe(200);
  });
});

describe('getAuditEvent', () => {
  it('returns one entry; another organization’s is 404; a malformed id 400; 403', async () => {
    const [id] = await entries(org.orgId, [1], { action: 'role.updated', target_type: 'role', target_id: 'role_01jg3b7f0n7w4k2d9s5h8g1q6z' });
    const res = await as(org).get(`/audit-log/${id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id,
      actor: { type: 'system', id: null, user_id: null, display: null },
      action: 'role.updated',
      target: { type: 'role', id: 'role_01jg3b7f0n7w4k2d9s5h8g1q6z' },
      changes: { minutes: 1 },
      ip: null,
      user_agent: null,
      request_id: null,
      created_at: expect.any(String),
    });
    const theirs = await as(other).get(`/audit-log/${id}`);
    expect([theirs.status, theirs.body.code]).toEqual([404, 'not_found']);
    expect((await as(org).get(`/audit-log/${newId('auditEvent')}`)).status).toBe(404);
    expect((await as(org).get('/audit-log/inv_01jg3b7f0v7h1j5k9m3n7p1q5r')).status).toBe(400);
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['invite:view']);
    expect((await t.as({ token: viewer, org: org.orgId }).get(`/audit-log/${id}`)).body.code).toBe('missing_permission');
  });
});
