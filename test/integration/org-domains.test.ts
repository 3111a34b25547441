import { randomBytes } from 'node:crypto';
import { notificationDeliveries } from '../../src/areas/notification-destinations/notification-destinations.consumer';
import { joinableOrganizationsFor } from '../../src/areas/org-domains/org-domains.service';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from '../../src/events/outbox';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { startDnsServer } from '../support/dns-peer';
import type { SeededOrg } from '../support/factories';
import { usePeers } from '../support/peers';

/*
 * The six org-domain operations over HTTP against the real app; verification asks a real DNS
 * server (dns2) on loopback through DNS_SERVERS.
 */

const DOM = /^dom_[0-7][0-9a-hjkmnp-tv-z]{25}$/;
const peers = usePeers();
let dns: Awaited<ReturnType<typeof startDnsServer>>;
let t: TestApp;
let org: SeededOrg;
let other: SeededOrg;

beforeAll(async () => {
  dns = await startDnsServer();
  t = await startTestApp({ env: { DNS_SERVERS: dns.server, DNS_TIMEOUT_MS: '1000' } });
  org = await t.factories.org();
  other = await t.factories.org();
});
afterAll(async () => {
  await t.close();
  await dns.close();
});

const unique = () => randomBytes(4).toString('hex');
const domainName = () => `d${unique()}.acme.example`;
const owner = () => t.as({ token: org.token, org: org.orgId });
const theirs = () => t.as({ token: other.token, org: other.orgId });
/** Lets the next lookup of a domain happen now (one per 10 seconds otherwise). */
const allowCheck = (id: string) =>
  t.db
    .updateTable('org_domains')
    .set({ last_checked_at: new Date(Date.now() - 11_000) })
    .where('id', '=', id)
    .execute();
const outbox = async (orgId: string, type: string) =>
  (await t.db.selectFrom('outbox').select(['payload']).where('org_id', '=', orgId).where('event_type', '=', type).orderBy('id').execute()).map(
    (e) => e.payload as any,
  );

async function claim(api = owner(), body: Record<string, unknown> = {}) {
  const res = await api.post('/org-domain', { domain: domainName(), ...body });
  expect(res.status).toBe(201);
  return res.body;
}

async function verified(api = owner(), body: Record<string, unknown> = {}) {
  const domain = await claim(api, body);
  dns.publish(domain.verification.name, [domain.verification.value]);
  const res = await api.post(`/org-domain/${domain.id}/verify`);
  expect(res.body.status).toBe('verified');
  return res.body.domain;
}

describe('createOrgDomain', () => {
  it('claims a domain, normalized, with its TXT record; audits org_domain.created', async () => {
    const name = domainName();
    const res = await owner().post('/org-domain', { domain: `${name.toUpperCase()}.` });
    expect(res.status).toBe(201);
    expect(res.body.id).toMatch(DOM);
    expect(res.headers.get('location')).toBe(`/org-domain/${res.body.id}`);
    expect(res.body).toMatchObject({
      domain: name,
      status: 'pending',
      verification: { type: 'TXT', name: `_mcp-control-plane.${name}` },
      verified_at: null,
      last_checked_at: null,
      last_check_error: null,
      auto_join: false,
      default_role_id: null,
      created_by_user_id: org.ownerId,
    });
    expect(res.body.verification.value).toMatch(/^mcp-control-plane-verification=[A-Za-z0-9_-]{32,64}$/);
    expect((await t.factories.auditEntries(org.orgId, 'org_domain.created')).at(-1)).toMatchObject({
      target_type: 'org_domain',
      target_id: res.body.id,
      changes: { domain: name, auto_join: false },
    });
    const idn = await owner().post('/org-domain', { domain: `bücher-${unique()}.example` });
    expect(idn.status).toBe(201);
    expect(idn.body.domain).toMatch(/^xn--bcher-.*\.example$/);
  });

  it('sets the joining defaults; refuses another organization’s role, the Owner role and a role granting more than the caller holds', async () => {
    const res = await owner().post('/org-domain', { domain: domainName(), auto_join: true, default_role_id: org.roleIds.auditor });
    expect(res.body).toMatchObject({ auto_join: true, default_role_id: org.roleIds.auditor });
    const foreign = await owner().post('/org-domain', { domain: domainName(), default_role_id: other.roleIds.member });
    expect([foreign.status, foreign.body.code, foreign.body.errors[0].pointer]).toEqual([400, 'unknown_reference', '/default_role_id']);
    const owners = await owner().post('/org-domain', { domain: domainName(), default_role_id: org.roleIds.owner });
    expect([owners.status, owners.body.code]).toEqual([400, 'validation_failed']);
    const adminId = await t.factories.member(org.orgId, { roles: ['admin'] });
    const asAdmin = t.as({ session: await t.factories.session(adminId), org: org.orgId });
    const escalation = await asAdmin.post('/org-domain', { domain: domainName(), default_role_id: org.roleIds.billing_admin });
    expect([escalation.status, escalation.body.code]).toEqual([403, 'permission_escalation']);
  });

  it('400 validation_failed for missing, mistyped and unknown members and names that are no DNS name; domain_not_allowed for suffixes and mail providers', async () => {
    for (const body of [
      {},
      { domain: 42 },
      { domain: domainName(), auto_join: 'yes' },
      { domain: domainName(), extra: 1 },
      { domain: 'not a domain' },
      { domain: 'localhost' },
      { domain: '-bad-.example' },
    ]) {
      const res = await owner().post('/org-domain', body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
    }
    for (const domain of ['gmail.com', 'CO.UK', 'github.io.']) {
      const res = await owner().post('/org-domain', { domain });
      expect([res.status, res.body.code]).toEqual([400, 'domain_not_allowed']);
    }
  });

  it('409 domain_taken for a name this organization claimed already, or another verified; another may claim an unverified one', async () => {
    const name = domainName();
    expect((await owner().post('/org-domain', { domain: name })).status).toBe(201);
    const again = await owner().post('/org-domain', { domain: name });
    expect([again.status, again.body.code]).toEqual([409, 'domain_taken']);
    expect((await theirs().post('/org-domain', { domain: name })).status).toBe(201);
    const mine = await verified();
    const taken = await theirs().post('/org-domain', { domain: mine.domain });
    expect([taken.status, taken.body.code]).toEqual([409, 'domain_taken']);
  });

  it('403 missing_permission without org_domain:manage', async () => {
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['org_domain:view']);
    const res = await t.as({ token: viewer, org: org.orgId }).post('/org-domain', { domain: domainName() });
    expect([res.status, res.body.code]).toEqual([403, 'missing_permission']);
  });
});

describe('listOrgDomains and getOrgDomain', () => {
  it('walks every page once, oldest first; filters by status; shows no other organization’s', async () => {
    const fresh = await t.factories.org();
    const api = t.as({ token: fresh.token, org: fresh.orgId });
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) ids.push((await claim(api)).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await api.get(`/org-domain?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.status).toBe(200);
      seen.push(...page.body.data.map((d: any) => d.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual(ids);
    const one = (await api.get(`/org-domain/${ids[2]}`)).body;
    dns.publish(one.verification.name, [one.verification.value]);
    await api.post(`/org-domain/${ids[2]}/verify`);
    expect((await api.get('/org-domain?status=verified')).body.data.map((d: any) => d.id)).toEqual([ids[2]]);
    expect((await api.get('/org-domain?status=pending')).body.data).toHaveLength(4);
    expect((await api.get('/org-domain?status=nope')).status).toBe(400);
    expect((await api.get('/org-domain?cursor=%%%')).status).toBe(400);
    expect((await owner().get('/org-domain?limit=200')).body.data.map((d: any) => d.id)).not.toContain(ids[0]);
  });

  it('another organization’s domain is 404, a malformed id 400; without org_domain:view 403', async () => {
    const mine = await claim();
    expect((await owner().get(`/org-domain/${mine.id}`)).body).toEqual(mine);
    const res = await theirs().get(`/org-domain/${mine.id}`);
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await owner().get('/org-domain/inv_01jg3b7f0v7h1j5k9m3n7p1q5r')).status).toBe(400);
    const memberId = await t.factories.member(org.orgId, { roles: ['member'] });
    const forbidden = await t.as({ session: await t.factories.session(memberId), org: org.orgId }).get('/org-domain');
    expect([forbidden.status, forbidden.body.code]).toEqual([403, 'missing_permission']);
  });
});

describe('updateOrgDomain', () => {
  it('changes the joining defaults; audits each change as from/to', async () => {
    const mine = await claim();
    const res = await owner().patch(`/org-domain/${mine.id}`, { auto_join: true, default_role_id: org.roleIds.auditor });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: mine.id, auto_join: true, default_role_id: org.roleIds.auditor, domain: mine.domain });
    expect((await t.factories.auditEntries(org.orgId, 'org_domain.updated')).at(-1)).toMatchObject({
      target_id: mine.id,
      changes: { auto_join: { from: false, to: true }, default_role_id: { from: null, to: org.roleIds.auditor } },
    });
    const cleared = await owner().patch(`/org-domain/${mine.id}`, { default_role_id: null });
    expect(cleared.body).toMatchObject({ auto_join: true, default_role_id: null });
  });

  it('400 for an empty body, a changed domain or a wrong type; the Owner role; 404 for another organization’s, unchanged; 403', async () => {
    const mine = await claim();
    for (const body of [{}, { domain: 'other.example' }, { auto_join: 'on' }]) {
      const res = await owner().patch(`/org-domain/${mine.id}`, body);
      expect([res.status, res.body.code]).toEqual([400, 'validation_failed']);
    }
    expect((await owner().patch(`/org-domain/${mine.id}`, { default_role_id: org.roleIds.owner })).body.code).toBe('validation_failed');
    expect((await owner().patch(`/org-domain/${mine.id}`, { default_role_id: newId('role') })).body.code).toBe('unknown_reference');
    const res = await theirs().patch(`/org-domain/${mine.id}`, { auto_join: true });
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await owner().get(`/org-domain/${mine.id}`)).body.auto_join).toBe(false);
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['org_domain:view']);
    expect((await t.as({ token: viewer, org: org.orgId }).patch(`/org-domain/${mine.id}`, { auto_join: true })).body.code).toBe('missing_permission');
  });
});

describe('deleteOrgDomain', () => {
  it('releases the claim (204; then 404); audits org_domain.deleted; another organization may then verify it', async () => {
    const mine = await verified();
    const res = await owner().delete(`/org-domain/${mine.id}`);
    expect(res.status).toBe(204);
    expect((await owner().get(`/org-domain/${mine.id}`)).status).toBe(404);
    expect((await owner().delete(`/org-domain/${mine.id}`)).status).toBe(404);
    expect((await t.factories.auditEntries(org.orgId, 'org_domain.deleted')).at(-1)).toMatchObject({
      target_id: mine.id,
      changes: { domain: mine.domain, status: 'verified' },
    });
    const claimed = await theirs().post('/org-domain', { domain: mine.domain });
    expect(claimed.status).toBe(201);
    dns.publish(claimed.body.verification.name, [claimed.body.verification.value]);
    expect((await theirs().post(`/org-domain/${claimed.body.id}/verify`)).body.status).toBe('verified');
  });

  it('404 for another organization’s, which stays; 403', async () => {
    const mine = await claim();
    expect((await theirs().delete(`/org-domain/${mine.id}`)).status).toBe(404);
    expect((await owner().get(`/org-domain/${mine.id}`)).status).toBe(200);
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['org_domain:view']);
    expect((await t.as({ token: viewer, org: org.orgId }).delete(`/org-domain/${mine.id}`)).body.code).toBe('missing_permission');
  });
});

describe('verifyOrgDomain', () => {
  it('fails without a record, then with the wrong value (showing what it found), then verifies; 429 between lookups; audits each check, emits org_domain.verified', async () => {
    const mine = await claim();
    const asked = () => dns.questions.filter((q) => q.name === mine.verification.name).length;

    const missing = await owner().post(`/org-domain/${mine.id}/verify`);
    expect(missing.status).toBe(200);
    expect(missing.body).toMatchObject({
      status: 'failed',
      failure_reason: 'record_not_found',
      found_values: [],
      domain: { status: 'failed', verified_at: null },
    });
    expect(missing.body.error).toContain(mine.verification.name);
    expect(missing.body.domain.last_check_error).toBe(missing.body.error);
    expect(missing.body.domain.last_checked_at).not.toBeNull();
    expect(asked()).toBeGreaterThan(0);

    const soon = await owner().post(`/org-domain/${mine.id}/verify`);
    expect([soon.status, soon.body.code]).toEqual([429, 'rate_limited']);
    expect(Number(soon.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);

    const typo = mine.verification.value.slice(0, -1);
    dns.publish(mine.verification.name, ['v=spf1 -all', typo]);
    await allowCheck(mine.id);
    const mismatch = await owner().post(`/org-domain/${mine.id}/verify`);
    expect(mismatch.body).toMatchObject({ status: 'failed', failure_reason: 'value_mismatch', found_values: ['v=spf1 -all', typo] });

    dns.publish(mine.verification.name, ['v=spf1 -all', mine.verification.value]);
    await allowCheck(mine.id);
    const ok = await owner().post(`/org-domain/${mine.id}/verify`);
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ status: 'verified', failure_reason: null, error: null, domain: { status: 'verified', last_check_error: null } });
    expect(ok.body.domain.verified_at).not.toBeNull();
    const checks = (await t.factories.auditEntries(org.orgId, 'org_domain.verification_checked')).filter((e) => e.target_id === mine.id);
    expect(checks.map((e) => e.changes.outcome)).toEqual(['failed', 'failed', 'verified']);
    expect(checks.map((e) => e.changes.failure_reason)).toEqual(['record_not_found', 'value_mismatch', null]);
    expect((await outbox(org.orgId, 'org_domain.verified')).at(-1)).toEqual({ org_domain: { id: mine.id, domain: mine.domain } });

    // Verified stays verified, and is looked up no more.
    const before = asked();
    dns.clear(mine.verification.name);
    const again = await owner().post(`/org-domain/${mine.id}/verify`);
    expect(again.body).toMatchObject({ status: 'verified', domain: { status: 'verified' } });
    expect(asked()).toBe(before);
    expect((await t.factories.auditEntries(org.orgId, 'org_domain.verification_checked')).at(-1)).toMatchObject({
      target_id: mine.id,
      changes: { outcome: 'verified', looked_up: false },
    });
  });

  it('a resolver failure or silence is dns_error (200, never 5xx), bounded by DNS_TIMEOUT_MS', async () => {
    const failing = await claim();
    dns.publish(failing.verification.name, 'servfail');
    const servfail = await owner().post(`/org-domain/${failing.id}/verify`);
    expect(servfail.status).toBe(200);
    expect(servfail.body).toMatchObject({ status: 'failed', failure_reason: 'dns_error' });
    const silent = await claim();
    dns.publish(silent.verification.name, 'silence');
    const timeout = await owner().post(`/org-domain/${silent.id}/verify`);
    expect(timeout.status).toBe(200);
    expect(timeout.body).toMatchObject({ status: 'failed', failure_reason: 'dns_error', domain: { status: 'failed' } });
  });

  it('409 domain_taken when another organization verified the name first', async () => {
    const name = domainName();
    const a = (await owner().post('/org-domain', { domain: name })).body;
    const b = (await theirs().post('/org-domain', { domain: name })).body;
    dns.publish(a.verification.name, [a.verification.value, b.verification.value]);
    expect((await theirs().post(`/org-domain/${b.id}/verify`)).body.status).toBe('verified');
    const res = await owner().post(`/org-domain/${a.id}/verify`);
    expect([res.status, res.body.code]).toEqual([409, 'domain_taken']);
    expect((await owner().get(`/org-domain/${a.id}`)).body.status).toBe('pending');
  });

  it('404 for another organization’s, looked up never; 403', async () => {
    const mine = await claim();
    const res = await theirs().post(`/org-domain/${mine.id}/verify`);
    expect([res.status, res.body.code]).toEqual([404, 'not_found']);
    expect((await owner().get(`/org-domain/${mine.id}`)).body.last_checked_at).toBeNull();
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['org_domain:view']);
    expect((await t.as({ token: viewer, org: org.orgId }).post(`/org-domain/${mine.id}/verify`)).body.code).toBe('missing_permission');
  });
});

describe('joinableOrganizationsFor', () => {
  it('lists the organizations whose verified domain with auto-join matches the address exactly, with the role to grant', async () => {
    const auto = await verified(owner(), { auto_join: true, default_role_id: org.roleIds.auditor });
    const plain = await verified(theirs(), { auto_join: true });
    const off = await verified(owner(), { auto_join: false });
    const pending = await claim(owner(), { auto_join: true });

    expect(await joinableOrganizationsFor(t.db, `Ada@${auto.domain.toUpperCase()}`)).toEqual([
      { orgId: org.orgId, orgName: expect.any(String), domainId: auto.id, domain: auto.domain, roleId: org.roleIds.auditor },
    ]);
    expect(await joinableOrganizationsFor(t.db, `bob@${plain.domain}`)).toEqual([
      { orgId: other.orgId, orgName: expect.any(String), domainId: plain.id, domain: plain.domain, roleId: other.roleIds.member },
    ]);
    expect(await joinableOrganizationsFor(t.db, `carol@${off.domain}`)).toEqual([]);
    expect(await joinableOrganizationsFor(t.db, `dan@${pending.domain}`)).toEqual([]);
    expect(await joinableOrganizationsFor(t.db, `eve@eu.${auto.domain}`)).toEqual([]);
    expect(await joinableOrganizationsFor(t.db, 'not-an-address')).toEqual([]);

    // Turning auto-join off stops it at once.
    await owner().patch(`/org-domain/${auto.id}`, { auto_join: false });
    expect(await joinableOrganizationsFor(t.db, `ada@${auto.domain}`)).toEqual([]);
  });
});

describe('org_domain.verified to a real receiver', () => {
  it('reaches a subscribed destination through the outbox', async () => {
    const fresh = await t.factories.org();
    const api = t.as({ token: fresh.token, org: fresh.orgId });
    const hook = `${peers.receiver.url}/services/T${unique()}/B${unique()}/${unique()}`;
    expect(
      (await api.post('/notification-destination', { name: 'Domains', type: 'slack', config: { webhook_url: hook }, event_types: ['org_domain.verified'] }))
        .status,
    ).toBe(201);
    const domain = await verified(api);
    const dispatcher = new OutboxDispatcher(t.db, [notificationDeliveries(t.deps)], t.deps.logger, DEFAULT_OUTBOX_OPTIONS);
    while ((await dispatcher.runOnce()).fannedOut > 0);
    const posts = peers.receiver.requests.filter((r) => hook.endsWith(r.path)).map((r) => JSON.parse(r.body).text as string);
    expect(posts).toHaveLength(1);
    expect(posts[0]).toContain('org_domain.verified');
    expect(posts[0]).toContain(domain.id);
    expect(posts[0]).toContain(domain.domain);
  });
});
