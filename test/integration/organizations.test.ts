import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { hashSecret } from '../../src/lib/crypto';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';

/*
 * The organization operations over HTTP against the real app: list, create, read, change
 * and delete. What every operation refuses (401, 403 missing_permission and requires_person,
 * the header, malformed ids, another organization's id) is also proven for these by
 * test/integration/every-operation.test.ts; here are their own rules.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const unique = () => randomBytes(4).toString('hex');
const ORG_ID = /^org_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

async function personWithSession(options: { secondFactor?: boolean } = {}) {
  const userId = await t.factories.user();
  return { userId, session: await t.factories.session(userId, options) };
}

/** Marks the session as having passed a step-up just now (sign-in flows come later). */
async function stepUp(session: string, at = new Date()) {
  await t.db.updateTable('sessions').set({ step_up_at: at }).where('token_hash', '=', hashSecret(session)).execute();
}

describe('listOrganizations', () => {
  it('lists the organizations a person is an active member of, oldest first, each once across pages', async () => {
    const { userId, session } = await personWithSession();
    const owned = await t.factories.org({ ownerId: userId });
    const other = await t.factories.org();
    await t.factories.member(other.orgId, { userId });
    const third = await t.factories.org();
    await t.factories.member(third.orgId, { userId, roles: ['auditor'] });
    const suspended = await t.factories.org();
    await t.factories.member(suspended.orgId, { userId, status: 'suspended' });
    await t.factories.org(); // not a member at all

    const seen: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 10; pages++) {
      const res = await t.as({ session }).get(`/organization?limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(1);
      seen.push(...res.body.data.map((o: { id: string }) => o.id));
      cursor = res.body.next_cursor ?? undefined;
      if (!cursor) break;
    }
    expect(seen).toEqual([owned.orgId, other.orgId, third.orgId].sort());
    const whole = await t.as({ session }).get('/organization');
    expect(whole.body.data[0]).toEqual({
      id: owned.orgId,
      name: expect.any(String),
      slug: expect.any(String),
      logo_url: null,
      require_mfa: false,
      plan: 'free',
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
  });

  it('lists only its own organization for an API token', async () => {
    const { userId } = await personWithSession();
    const a = await t.factories.org({ ownerId: userId });
    await t.factories.org({ ownerId: userId });
    const res = await t.as({ token: a.token }).get('/organization');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [expect.objectContaining({ id: a.orgId })], next_cursor: null });
  });

  it('refuses a cursor of another list and an out-of-range limit', async () => {
    const { session } = await personWithSession();
    expectError(
      await t.as({ session }).get(`/organization?cursor=${Buffer.from('tok_01jg3b7f0r8t2y6v4h1q9p3a5s').toString('base64url')}`),
      400,
      'invalid_cursor',
    );
    expectError(await t.as({ session }).get('/organization?limit=0'), 400, 'validation_failed');
  });
});

describe('createOrganization', () => {
  it('creates an organization on the free plan with the caller as its Owner, and records it in the new organization', async () => {
    const { userId, session } = await personWithSession();
    const slug = `acme-${unique()}`;
    const res = await t.as({ session }).post('/organization', { name: 'Acme Inc.', slug });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(ORG_ID),
      name: 'Acme Inc.',
      slug,
      logo_url: null,
      require_mfa: false,
      plan: 'free',
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect(res.headers.get('location')).toBe(`/organization/${res.body.id}`);
    const orgId = res.body.id as string;
    // The creator holds Owner: everything, including deleting it.
    const roles = await t.db
      .selectFrom('role_assignments as ra')
      .innerJoin('roles as r', 'r.id', 'ra.role_id')
      .select(['r.system_key'])
      .where('ra.org_id', '=', orgId)
      .where('ra.user_id', '=', userId)
      .execute();
    expect(roles.map((r) => r.system_key)).toEqual(['owner']);
    const systemRoles = await t.db.selectFrom('roles').select('system_key').where('org_id', '=', orgId).orderBy('system_key').execute();
    expect(systemRoles.map((r) => r.system_key)).toEqual(['admin', 'auditor', 'billing_admin', 'member', 'owner']);
    const membership = await t.db.selectFrom('memberships').select(['status', 'via']).where('org_id', '=', orgId).execute();
    expect(membership).toEqual([{ status: 'active', via: 'creator' }]);
    expect((await t.as({ session, org: orgId }).get(`/organization/${orgId}`)).status).toBe(200);
    const audit = await t.factories.auditEntries(orgId, 'organization.created');
    expect(audit).toEqual([
      expect.objectContaining({ actor_type: 'user', actor_id: userId, target_type: 'organization', target_id: orgId, changes: { name: 'Acme Inc.', slug } }),
    ]);
  });

  it('makes a slug from the name, with a suffix when that one is taken', async () => {
    const { session } = await personWithSession();
    const name = `Side Project ${unique()}`;
    const first = await t.as({ session }).post('/organization', { name });
    expect(first.status).toBe(201);
    expect(first.body.slug).toBe(name.toLowerCase().replace(/ /g, '-'));
    const second = await t.as({ session }).post('/organization', { name });
    expect(second.status).toBe(201);
    expect(second.body.slug).toMatch(new RegExp(`^${first.body.slug}-[a-z0-9]+$`));
    const accented = await t.as({ session }).post('/organization', { name: `Crème Brûlée — Café ${name.slice(-8)}` });
    expect(accented.body.slug).toBe(`creme-brulee-cafe-${name.slice(-8)}`);
    // Cut to length, never ending in a hyphen.
    const long = await t.as({ session }).post('/organization', { name: `${'x'.repeat(47)} and more` });
    expect(long.body.slug).toBe('x'.repeat(47));
    const symbols = await t.as({ session }).post('/organization', { name: '***' });
    expect(symbols.body.slug).toMatch(/^org(-[a-z0-9]+)?$/);
  });

  it('answers 409 slug_taken for a slug another organization uses', async () => {
    const { session } = await personWithSession();
    const slug = `taken-${unique()}`;
    expect((await t.as({ session }).post('/organization', { name: 'One', slug })).status).toBe(201);
    expectError(await t.as({ session }).post('/organization', { name: 'Two', slug }), 409, 'slug_taken');
  });

  it('refuses an API token (a person’s action) and bad bodies', async () => {
    const org = await t.factories.org();
    expectError(await t.as({ token: org.token }).post('/organization', { name: 'By token' }), 403, 'requires_person');
    const { session } = await personWithSession();
    const client = t.as({ session });
    for (const body of [{}, { name: '' }, { name: 42 }, { name: 'X', slug: 'Not A Slug' }, { name: 'X', slug: '-edge' }, { name: 'X', plan: 'team' }]) {
      expectError(await client.post('/organization', body), 400, 'validation_failed');
    }
  });
});

describe('getOrganization', () => {
  it('returns the organization of the header, and 404 for any other id', async () => {
    const org = await t.factories.org({ name: 'Readable' });
    const other = await t.factories.org();
    const res = await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: org.orgId, name: 'Readable', plan: 'free', require_mfa: false });
    expectError(await t.as({ token: org.token, org: org.orgId }).get(`/organization/${other.orgId}`), 404, 'not_found');
    const auditor = await t.factories.member(org.orgId, { roles: ['auditor'] });
    expect((await t.as({ token: await t.factories.token(org.orgId, auditor), org: org.orgId }).get(`/organization/${org.orgId}`)).status).toBe(200);
  });
});

describe('updateOrganization', () => {
  it('renames and changes the slug, recording old and new values', async () => {
    const org = await t.factories.org({ name: 'Before' });
    const slug = `after-${unique()}`;
    const res = await t.as({ token: org.token, org: org.orgId }).patch(`/organization/${org.orgId}`, { name: 'After', slug });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: org.orgId, name: 'After', slug });
    const [entry] = await t.factories.auditEntries(org.orgId, 'organization.updated');
    expect(entry).toMatchObject({
      actor_type: 'api_token',
      target_id: org.orgId,
      changes: { name: { from: 'Before', to: 'After' }, slug: { from: expect.any(String), to: slug } },
    });
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).body.slug).toBe(slug);
  });

  it('answers 409 slug_taken for another organization’s slug, and changes nothing', async () => {
    const org = await t.factories.org();
    const other = await t.factories.org();
    const otherSlug = (await t.as({ token: other.token, org: other.orgId }).get(`/organization/${other.orgId}`)).body.slug;
    expectError(await t.as({ token: org.token, org: org.orgId }).patch(`/organization/${org.orgId}`, { name: 'Renamed', slug: otherSlug }), 409, 'slug_taken');
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).body.name).not.toBe('Renamed');
    expect(await t.factories.auditEntries(org.orgId, 'organization.updated')).toEqual([]);
  });

  it('reserves the second-factor requirement for a person who passed a step-up', async () => {
    const org = await t.factories.org();
    const byToken = t.as({ token: org.token, org: org.orgId });
    expectError(await byToken.patch(`/organization/${org.orgId}`, { require_mfa: true }), 403, 'requires_person');
    // The current value changes nothing, and a token may send it.
    expect((await byToken.patch(`/organization/${org.orgId}`, { require_mfa: false, name: 'Same MFA' })).status).toBe(200);

    const session = await t.factories.session(org.ownerId, { secondFactor: true });
    const byPerson = t.as({ session, org: org.orgId });
    expectError(await byPerson.patch(`/organization/${org.orgId}`, { require_mfa: true }), 403, 'step_up_required');
    await stepUp(session, new Date(Date.now() - 6 * 60_000));
    expectError(await byPerson.patch(`/organization/${org.orgId}`, { require_mfa: true }), 403, 'step_up_required');
    await stepUp(session);
    const on = await byPerson.patch(`/organization/${org.orgId}`, { require_mfa: true });
    expect(on.status).toBe(200);
    expect(on.body.require_mfa).toBe(true);
    const [entry] = (await t.factories.auditEntries(org.orgId, 'organization.updated')).filter((e) => 'require_mfa' in e.changes);
    expect(entry).toMatchObject({ actor_type: 'user', actor_id: org.ownerId, changes: { require_mfa: { from: false, to: true } } });

    // From now on a session without a second factor is refused here; API tokens are not.
    const plain = await t.factories.session(org.ownerId);
    expectError(await t.as({ session: plain, org: org.orgId }).get(`/organization/${org.orgId}`), 403, 'mfa_setup_required');
    expect((await byToken.get(`/organization/${org.orgId}`)).status).toBe(200);
  });

  it('refuses empty and unknown changes, and the plan (billing moves it)', async () => {
    const org = await t.factories.org();
    const client = t.as({ token: org.token, org: org.orgId });
    for (const body of [{}, { plan: 'team' }, { name: '' }, { name: 7 }, { slug: 'UPPER' }, { require_mfa: 'yes' }]) {
      expectError(await client.patch(`/organization/${org.orgId}`, body), 400, 'validation_failed');
    }
  });
});

describe('deleteOrganization', () => {
  async function doomed() {
    const org = await t.factories.org();
    const slug = (await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).body.slug as string;
    const session = await t.factories.session(org.ownerId, { secondFactor: true });
    return { ...org, slug, session };
  }

  it('deletes everything the organization owns at once; its tokens stop on the next request', async () => {
    const org = await doomed();
    const member = await t.factories.member(org.orgId);
    const memberToken = await t.factories.token(org.orgId, member);
    await t.factories.team(org.orgId, 'Platform', [member]);
    const destination = await t.as({ token: org.token, org: org.orgId }).post('/notification-destination', {
      name: 'Ops',
      type: 'email',
      config: { to: ['ops@example.com'] },
      event_types: ['member.joined'],
    });
    expect(destination.status).toBe(201);
    await t.factories.event(org.orgId, 'member.joined', { user_id: member, email: 'm@example.com', via: 'invite', role_ids: [] } as never);
    // Both tokens work (and are remembered) before.
    expect((await t.as({ token: memberToken, org: org.orgId }).get(`/organization/${org.orgId}`)).status).toBe(200);
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).status).toBe(200);
    const survivor = await t.factories.org({ ownerId: member });

    const res = await t.as({ session: org.session, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${org.slug}`);
    expect(res.status).toBe(204);
    expect(res.text).toBe('');

    for (const token of [org.token, memberToken]) {
      expectError(await t.as({ token, org: org.orgId }).get(`/organization/${org.orgId}`), 401, 'invalid_token');
    }
    expectError(await t.as({ session: org.session, org: org.orgId }).get(`/organization/${org.orgId}`), 403, 'not_a_member');
    // Nothing of it is left in any table, but the one entry that records the deletion.
    const tables = await sql<{
      table_name: string;
    }>`select table_name from information_schema.columns where table_schema = current_schema() and column_name = 'org_id'`.execute(t.db);
    for (const { table_name: table } of tables.rows) {
      const left = await sql<{ n: number }>`select count(*)::int as n from ${sql.table(table)} where org_id = ${org.orgId}`.execute(t.db);
      expect([table, left.rows[0]?.n]).toEqual([table, table === 'audit_log' ? 1 : 0]);
    }
    expect(await t.db.selectFrom('organizations').select('id').where('id', '=', org.orgId).execute()).toEqual([]);
    expect(await t.factories.auditEntries(org.orgId)).toEqual([
      expect.objectContaining({
        action: 'organization.deleted',
        actor_type: 'user',
        actor_id: org.ownerId,
        target_id: org.orgId,
        changes: { name: expect.any(String), slug: org.slug },
      }),
    ]);
    // The people keep their accounts and their other organizations.
    expect((await t.db.selectFrom('users').select('id').where('id', 'in', [org.ownerId, member]).execute()).length).toBe(2);
    expect((await t.as({ token: survivor.token, org: survivor.orgId }).get(`/organization/${survivor.orgId}`)).status).toBe(200);
  });

  it('asks for the slug in confirm', async () => {
    const org = await doomed();
    const res = await t.as({ session: org.session, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=not-${org.slug}`);
    expectError(res, 400, 'validation_failed');
    expect(res.body.errors).toEqual([{ in: 'query', pointer: '/confirm', message: expect.stringContaining(org.slug) }]);
    expectError(await t.as({ session: org.session, org: org.orgId }).delete(`/organization/${org.orgId}`), 400, 'validation_failed');
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).status).toBe(200);
  });

  it('is the Owner’s alone: an Admin is refused, a token is not a person', async () => {
    const org = await doomed();
    const admin = await t.factories.member(org.orgId, { roles: ['admin'] });
    const adminSession = await t.factories.session(admin, { secondFactor: true });
    expectError(await t.as({ session: adminSession, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${org.slug}`), 403, 'missing_permission');
    expectError(await t.as({ token: org.token, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${org.slug}`), 403, 'requires_person');
    const other = await doomed();
    expectError(await t.as({ session: org.session, org: org.orgId }).delete(`/organization/${other.orgId}?confirm=${other.slug}`), 404, 'not_found');
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).status).toBe(200);
    expect((await t.as({ token: other.token, org: other.orgId }).get(`/organization/${other.orgId}`)).status).toBe(200);
  });
});
