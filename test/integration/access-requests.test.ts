import type { components } from '../../generated/openapi';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import type { SeededOrg } from '../support/factories';
import { usePeers } from '../support/peers';

/*
 * The five access request operations over HTTP through the typed client, against the real
 * app on a fresh database; every response is checked against the spec.
 */

type Schemas = components['schemas'];
const AREQ = /^areq_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

let t: TestApp;
let org: SeededOrg;
let other: SeededOrg;
const peers = usePeers();

beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
  org = await t.factories.org();
  other = await t.factories.org();
});
afterAll(async () => {
  await t.close();
});

let ownerSession: string;

/** A member with the Member role (no access_request permission), by token: a caller. */
async function member(target: SeededOrg = org, roles: string[] = ['member']) {
  const userId = await t.factories.member(target.orgId, { roles });
  return { userId, token: await t.factories.token(target.orgId, userId), org: target.orgId };
}

let n = 0;
async function restriction(body: Partial<Schemas['RestrictionCreate']> = {}, target: SeededOrg = org): Promise<string> {
  const res = await t.as(target).op('createRestriction', {
    body: {
      name: `R ${++n}`,
      effect: 'require_approval',
      match: { connector_slug: 'tickets-demo', tool_pattern: 'delete_*' },
      applies_to: { everyone: true },
      ...body,
    },
  });
  if (res.status !== 201) throw new Error(res.text);
  return res.body.id;
}

const events = async (type: string) =>
  (await t.db.selectFrom('outbox').select(['payload']).where('org_id', '=', org.orgId).where('event_type', '=', type).orderBy('id').execute()).map(
    (e) => e.payload as any,
  );

beforeAll(async () => {
  ownerSession = await t.factories.session(org.ownerId);
});

describe('createAccessRequest', () => {
  it('files for one tool, one connector or the whole restriction; 201 with Location; audits and emits access_request.created', async () => {
    const m = await member();
    const rst = await restriction();
    const tool = await t
      .as(m)
      .op('createAccessRequest', { body: { restriction_id: rst, connector_slug: 'tickets-demo', tool_name: 'delete_ticket', reason: 'Cleanup.' } });
    expect(tool.status).toBe(201);
    expect(tool.body.id).toMatch(AREQ);
    expect(tool.headers.get('location')).toBe(`/access-request/${tool.body.id}`);
    expect(tool.body).toMatchObject({
      requester_user_id: m.userId,
      restriction_id: rst,
      connector_slug: 'tickets-demo',
      tool_name: 'delete_ticket',
      synthetic_tool_id: null,
      reason: 'Cleanup.',
      status: 'pending',
      resolved_by_user_id: null,
      resolution_note: null,
      resolved_at: null,
      exception_expires_at: null,
    });
    // Left out: the restriction's own connector, every tool.
    const whole = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, reason: 'Everything.' } });
    expect(whole.body).toMatchObject({ connector_slug: 'tickets-demo', tool_name: null });
    expect((await events('access_request.created')).at(-1)).toEqual({
      access_request: {
        id: whole.body.id,
        requester_user_id: m.userId,
        restriction_id: rst,
        connector_slug: 'tickets-demo',
        tool_name: null,
        synthetic_tool_id: null,
        status: 'pending',
        reason: 'Everything.',
      },
    });
    const audit = (await t.factories.auditEntries(org.orgId, 'access_request.created')).at(-1);
    expect(audit).toMatchObject({ target_id: whole.body.id, actor_user_id: m.userId });

    // A restriction on any connector: the named connector is kept; none named is null.
    const any = await restriction({ match: { tool_pattern: 'export_*' } });
    expect((await t.as(m).op('createAccessRequest', { body: { restriction_id: any, connector_slug: 'docs-demo', reason: 'x' } })).body).toMatchObject({
      connector_slug: 'docs-demo',
      tool_name: null,
    });
    expect((await t.as(m).op('createAccessRequest', { body: { restriction_id: any, reason: 'x' } })).body).toMatchObject({
      connector_slug: null,
      tool_name: null,
    });
  });

  it('a synthetic tool restriction: the request names the tool; connector or tool sent is 400', async () => {
    const m = await member();
    const stool = newId('syntheticTool');
    await t.db
      .insertInto('synthetic_tools')
      .values({
        id: stool,
        org_id: org.orgId,
        name: stool,
        description: 'd',
        input_schema: '{}',
        output_schema: null,
        steps: '[]',
        output: '{}',
        created_by_user_id: null,
      })
      .execute();
    const rst = await restriction({ match: { synthetic_tool_id: stool } });
    const res = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, reason: 'Release notes.' } });
    expect(res.body).toMatchObject({ connector_slug: null, tool_name: null, synthetic_tool_id: stool });
    const bad = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'x', reason: 'r' } });
    expect([bad.status, bad.error?.code, bad.error?.errors[0]?.pointer]).toEqual([400, 'validation_failed', '/tool_name']);
  });

  it('400 validation_failed for a connector or tool the restriction does not match', async () => {
    const m = await member();
    const rst = await restriction();
    const wrongConnector = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, connector_slug: 'docs-demo', reason: 'r' } });
    expect([wrongConnector.status, wrongConnector.error?.code, wrongConnector.error?.errors[0]?.pointer]).toEqual([
      400,
      'validation_failed',
      '/connector_slug',
    ]);
    const wrongTool = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'bulk_delete_ticket', reason: 'r' } });
    expect([wrongTool.status, wrongTool.error?.code, wrongTool.error?.errors[0]?.pointer]).toEqual([400, 'validation_failed', '/tool_name']);
    const blank = await t.as(m).post('/access-request', { restriction_id: rst, reason: '   ' });
    expect([blank.status, blank.body.code]).toEqual([400, 'validation_failed']);
  });

  it('400 unknown_reference for a restriction not of the organization', async () => {
    const m = await member();
    const theirs = await restriction({}, other);
    for (const id of [theirs, newId('restriction')]) {
      const res = await t.as(m).op('createAccessRequest', { body: { restriction_id: id, reason: 'r' } });
      expect([res.status, res.error?.code, res.error?.errors[0]?.pointer]).toEqual([400, 'unknown_reference', '/restriction_id']);
    }
  });

  it('409 restriction_not_requestable: inactive, deny, or not applying to the caller', async () => {
    const m = await member();
    const bystander = await t.factories.member(org.orgId);
    const teamId = await t.factories.team(org.orgId, 'Requesters', [m.userId]);
    for (const body of [{ is_active: false }, { effect: 'deny' as const }, { applies_to: { user_ids: [bystander] } }]) {
      const res = await t.as(m).op('createAccessRequest', { body: { restriction_id: await restriction(body), reason: 'r' } });
      expectError(res, 409, 'restriction_not_requestable');
    }
    // Applying through a team or a role takes requests.
    expect(
      (await t.as(m).op('createAccessRequest', { body: { restriction_id: await restriction({ applies_to: { team_ids: [teamId] } }), reason: 'r' } })).status,
    ).toBe(201);
    expect(
      (
        await t
          .as(m)
          .op('createAccessRequest', { body: { restriction_id: await restriction({ applies_to: { role_ids: [org.roleIds.member] } }), reason: 'r' } })
      ).status,
    ).toBe(201);
  });

  it('409 access_request_exists for a pending request or a live approval of the same scope; after a denial or expiry, again', async () => {
    const m = await member();
    const rst = await restriction();
    const first = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_ticket', reason: 'r' } });
    const dup = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_ticket', reason: 'again' } });
    expectError(dup, 409, 'access_request_exists');
    // Another scope is another request.
    expect((await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, reason: 'whole' } })).status).toBe(201);
    const approver = { session: ownerSession, org: org.orgId };
    await t.as(approver).op('resolveAccessRequest', { params: { id: first.body.id }, body: { decision: 'approved' } });
    expect((await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_ticket', reason: 'again' } })).error?.code).toBe(
      'access_request_exists',
    );
    await t.db
      .updateTable('access_requests')
      .set({ exception_expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', first.body.id)
      .execute();
    const refiled = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_ticket', reason: 'expired' } });
    expect(refiled.status).toBe(201);
    await t.as(org).op('resolveAccessRequest', { params: { id: refiled.body.id }, body: { decision: 'denied' } });
    expect((await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_ticket', reason: 'after denial' } })).status).toBe(201);
  });
});

describe('listAccessRequests and getAccessRequest', () => {
  let fresh: SeededOrg;
  let alice: Awaited<ReturnType<typeof member>>;
  let bob: Awaited<ReturnType<typeof member>>;
  let rstA: string;
  let rstB: string;
  const ids: string[] = [];
  beforeAll(async () => {
    fresh = await t.factories.org();
    alice = await member(fresh);
    bob = await member(fresh);
    rstA = await restriction({}, fresh);
    rstB = await restriction({ match: { tool_pattern: 'x*' } }, fresh);
    ids.push((await t.as(alice).op('createAccessRequest', { body: { restriction_id: rstA, reason: 'a1' } })).body.id);
    ids.push((await t.as(bob).op('createAccessRequest', { body: { restriction_id: rstA, reason: 'b1' } })).body.id);
    ids.push((await t.as(alice).op('createAccessRequest', { body: { restriction_id: rstB, reason: 'a2' } })).body.id);
    await t.as(alice).op('withdrawAccessRequest', { params: { id: ids[2] as string } });
  });
  const idsOf = (res: { body: { data: { id: string }[] } }) => res.body.data.map((r) => r.id);

  it('a member sees their own; naming someone else is 403 missing_permission', async () => {
    expect(idsOf(await t.as(alice).op('listAccessRequests'))).toEqual([ids[0], ids[2]]);
    expect(idsOf(await t.as(bob).op('listAccessRequests'))).toEqual([ids[1]]);
    expect(idsOf(await t.as(alice).op('listAccessRequests', { query: { requester_user_id: alice.userId } }))).toEqual([ids[0], ids[2]]);
    const res = await t.as(alice).op('listAccessRequests', { query: { requester_user_id: bob.userId } });
    expectError(res, 403, 'missing_permission');
  });

  it('holders of access_request:view or :resolve see the queue, filtered and paged', async () => {
    const viewer = await member(fresh, ['auditor']);
    const resolverRole = await t.factories.customRole(fresh.orgId, ['access_request:resolve']);
    const resolver = await member(fresh, [resolverRole]);
    for (const who of [viewer, resolver, fresh]) {
      expect(idsOf(await t.as(who).op('listAccessRequests'))).toEqual(ids);
      expect(idsOf(await t.as(who).op('listAccessRequests', { query: { status: 'pending' } }))).toEqual([ids[0], ids[1]]);
      expect(idsOf(await t.as(who).op('listAccessRequests', { query: { requester_user_id: bob.userId } }))).toEqual([ids[1]]);
      expect(idsOf(await t.as(who).op('listAccessRequests', { query: { restriction_id: rstB } }))).toEqual([ids[2]]);
    }
    const first = await t.as(viewer).op('listAccessRequests', { query: { limit: 2 } });
    expect(idsOf(first)).toEqual([ids[0], ids[1]]);
    const second = await t.as(viewer).op('listAccessRequests', { query: { limit: 2, cursor: first.body.next_cursor as string } });
    expect(second.body).toEqual({ data: [expect.objectContaining({ id: ids[2] })], next_cursor: null });
  });

  it('400 unknown_reference for a requester or restriction naming nothing in the organization; a deleted restriction still names its requests', async () => {
    const res = await t.as(fresh).op('listAccessRequests', { query: { requester_user_id: org.ownerId, restriction_id: newId('restriction') } });
    expectError(res, 400, 'unknown_reference');
    expect(res.error?.errors.map((e: { pointer: string }) => e.pointer)).toEqual(['/requester_user_id', '/restriction_id']);
    const gone = await restriction({}, fresh);
    const filed = await t.as(bob).op('createAccessRequest', { body: { restriction_id: gone, reason: 'r' } });
    await t.as(fresh).op('deleteRestriction', { params: { id: gone } });
    expect((await t.as(fresh).op('listAccessRequests', { query: { restriction_id: gone } })).body.data).toEqual([
      expect.objectContaining({ id: filed.body.id, status: 'denied', resolved_by_user_id: null }),
    ]);
  });

  it('get: one’s own, or any with view; someone else’s is 404 to a plain member, as is another organization’s', async () => {
    expect((await t.as(alice).op('getAccessRequest', { params: { id: ids[0] as string } })).body).toMatchObject({ id: ids[0], reason: 'a1' });
    const probe = await t.as(alice).op('getAccessRequest', { params: { id: ids[1] as string } });
    expectError(probe, 404, 'not_found');
    expect((await t.as(await member(fresh, ['auditor'])).op('getAccessRequest', { params: { id: ids[1] as string } })).status).toBe(200);
    const theirs = await t.as(org).op('getAccessRequest', { params: { id: ids[0] as string } });
    expectError(theirs, 404, 'not_found');
  });
});

describe('resolveAccessRequest', () => {
  it('a person approves with an expiry: audits, emits access_request.resolved', async () => {
    const m = await member();
    const rst = await restriction();
    const filed = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_ticket', reason: 'r' } });
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const res = await t
      .as({ session: ownerSession, org: org.orgId })
      .op('resolveAccessRequest', { params: { id: filed.body.id }, body: { decision: 'approved', note: 'This week.', expires_at: expires } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'approved', resolved_by_user_id: org.ownerId, resolution_note: 'This week.', exception_expires_at: expires });
    expect(res.body.resolved_at).not.toBeNull();
    expect((await events('access_request.resolved')).at(-1)).toEqual({
      access_request: expect.objectContaining({ id: filed.body.id, status: 'approved' }),
      resolved_by_user_id: org.ownerId,
    });
    expect((await t.factories.auditEntries(org.orgId, 'access_request.resolved')).at(-1)).toMatchObject({
      target_id: filed.body.id,
      changes: { decision: 'approved', expires_at: expires },
    });
    // The requester is told by email (a real SMTP server on loopback).
    const email = (await t.db.selectFrom('users').select('email').where('id', '=', m.userId).executeTakeFirstOrThrow()).email;
    const mail = peers.smtp.messages.filter((message) => message.to.includes(email));
    expect(mail).toHaveLength(1);
    expect(mail[0]?.raw).toContain('Access request approved');
    expect(mail[0]?.raw).toContain('This week.');
    const again = await t
      .as({ session: ownerSession, org: org.orgId })
      .op('resolveAccessRequest', { params: { id: filed.body.id }, body: { decision: 'denied' } });
    expectError(again, 409, 'invalid_transition');
  });

  it('approving without an expiry; an API token approving is 403 requires_person, denying with one is fine', async () => {
    const m = await member();
    const rst = await restriction();
    const a = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_a', reason: 'r' } });
    const b = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, tool_name: 'delete_b', reason: 'r' } });
    const byToken = await t.as(org).op('resolveAccessRequest', { params: { id: a.body.id }, body: { decision: 'approved' } });
    expectError(byToken, 403, 'requires_person');
    expect((await t.as(org).op('getAccessRequest', { params: { id: a.body.id } })).body.status).toBe('pending');
    const denied = await t.as(org).op('resolveAccessRequest', { params: { id: a.body.id }, body: { decision: 'denied', note: 'No.' } });
    expect(denied.body).toMatchObject({ status: 'denied', resolved_by_user_id: org.ownerId, resolution_note: 'No.', exception_expires_at: null });
    const approved = await t
      .as({ session: ownerSession, org: org.orgId })
      .op('resolveAccessRequest', { params: { id: b.body.id }, body: { decision: 'approved', expires_at: null } });
    expect(approved.body).toMatchObject({ status: 'approved', exception_expires_at: null });
  });

  it('refuses an expiry not in the future, one’s own request, a caller without the permission; 404 for another organization’s', async () => {
    const m = await member();
    const rst = await restriction();
    const filed = await t.as(m).op('createAccessRequest', { body: { restriction_id: rst, reason: 'r' } });
    const past = await t.as({ session: ownerSession, org: org.orgId }).op('resolveAccessRequest', {
      params: { id: filed.body.id },
      body: {
        decision: 'approved',
        expires_at: new Date(Date.now() - 1000).toISOString(),
      },
    });
    expect([past.status, past.error?.code, past.error?.errors[0]?.pointer]).toEqual([400, 'validation_failed', '/expires_at']);
    const noPermission = await t.as(m).op('resolveAccessRequest', { params: { id: filed.body.id }, body: { decision: 'denied' } });
    expectError(noPermission, 403, 'missing_permission');
    const own = await t.as(org).op('createAccessRequest', { body: { restriction_id: rst, reason: 'mine' } });
    const self = await t.as(org).op('resolveAccessRequest', { params: { id: own.body.id }, body: { decision: 'denied' } });
    expectError(self, 403, 'cannot_resolve_own_request');
    const theirs = await t.as(other).op('resolveAccessRequest', { params: { id: filed.body.id }, body: { decision: 'denied' } });
    expectError(theirs, 404, 'not_found');
    expect((await t.as(org).op('getAccessRequest', { params: { id: filed.body.id } })).body.status).toBe('pending');
  });
});

describe('withdrawAccessRequest', () => {
  it('the requester withdraws a pending request; then 409 invalid_transition', async () => {
    const m = await member();
    const filed = await t.as(m).op('createAccessRequest', { body: { restriction_id: await restriction(), reason: 'r' } });
    const res = await t.as(m).op('withdrawAccessRequest', { params: { id: filed.body.id } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'withdrawn', resolved_by_user_id: null, exception_expires_at: null });
    expect(res.body.resolved_at).not.toBeNull();
    expect((await t.factories.auditEntries(org.orgId, 'access_request.withdrawn')).at(-1)).toMatchObject({ target_id: filed.body.id });
    const again = await t.as(m).op('withdrawAccessRequest', { params: { id: filed.body.id } });
    expectError(again, 409, 'invalid_transition');
    const resolve = await t.as(org).op('resolveAccessRequest', { params: { id: filed.body.id }, body: { decision: 'denied' } });
    expectError(resolve, 409, 'invalid_transition');
  });

  it('403 insufficient_access for a reader who did not file it; 404 for other members and organizations', async () => {
    const m = await member();
    const filed = await t.as(m).op('createAccessRequest', { body: { restriction_id: await restriction(), reason: 'r' } });
    const byOwner = await t.as(org).op('withdrawAccessRequest', { params: { id: filed.body.id } });
    expectError(byOwner, 403, 'insufficient_access');
    const plain = await t.as(await member()).op('withdrawAccessRequest', { params: { id: filed.body.id } });
    expectError(plain, 404, 'not_found');
    const theirs = await t.as(other).op('withdrawAccessRequest', { params: { id: filed.body.id } });
    expectError(theirs, 404, 'not_found');
    expect((await t.as(m).op('getAccessRequest', { params: { id: filed.body.id } })).body.status).toBe('pending');
  });
});
