import { PLANS } from '../../src/access/entitlements';
import { PERMISSIONS } from '../../src/identity/permissions';
import { loadSpec } from '../../src/spec';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';

/*
 * getEntitlements (what the plan allows and what is used, counted when asked) and
 * listPermissions (the catalog as the spec assembles it).
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('getEntitlements', () => {
  it('answers the free plan’s features and limits with usage counted now', async () => {
    const org = await t.factories.org();
    await t.factories.member(org.orgId, { roles: ['member'] });
    await t.factories.member(org.orgId, { roles: ['auditor'] });
    const client = t.as({ token: org.token, org: org.orgId });
    const toolbox = await client.post('/toolbox', { name: 'Ops', entries: [] });
    expect(toolbox.status).toBe(201);
    const res = await client.get('/entitlement');
    expect(res.status).toBe(200);
    const free = PLANS.free!;
    expect(res.body).toEqual({
      organization_id: org.orgId,
      plan: 'free',
      features: free.features,
      limits: {
        seats: { limit: free.limits.seats, used: 2 },
        connections: { limit: free.limits.connections, used: 0 },
        mcp_servers: { limit: free.limits.mcp_servers, used: 0 },
        custom_connectors: { limit: free.limits.custom_connectors, used: 0 },
        toolboxes: { limit: free.limits.toolboxes, used: 1 },
        synthetic_tools: { limit: free.limits.synthetic_tools, used: 0 },
        file_storage_bytes: { limit: free.limits.file_storage_bytes, used: 0 },
      },
      audit_log_retention_days: free.auditLogRetentionDays,
      computed_at: expect.any(String),
    });
  });

  it('follows the plan in force (enterprise: no limits)', async () => {
    const org = await t.factories.org();
    await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', org.orgId).execute();
    const res = await t.as({ token: org.token, org: org.orgId }).get('/entitlement');
    expect(res.body).toMatchObject({
      plan: 'enterprise',
      features: { sso: true, scim: true },
      limits: { seats: { limit: null, used: 1 } },
      audit_log_retention_days: null,
    });
  });

  it('needs organization:view in the organization of the header', async () => {
    const org = await t.factories.org();
    const other = await t.factories.org();
    expectError(await t.as({ token: org.token, org: other.orgId }).get('/entitlement'), 403, 'not_a_member');
    expectError(await t.as({ token: org.token }).get('/entitlement'), 400, 'organization_header_required');
  });
});

describe('listPermissions', () => {
  const descriptions = (loadSpec().components.schemas.Permission as { 'x-enumDescriptions': Record<string, string> })['x-enumDescriptions'];

  it('walks the whole catalog in its order, each permission once, for a session or a token', async () => {
    const org = await t.factories.org();
    const session = await t.factories.session(org.ownerId);
    for (const credential of [{ session }, { token: org.token }]) {
      const seen: string[] = [];
      let cursor: string | undefined;
      for (let pages = 0; pages < 100; pages++) {
        const res = await t.as(credential).get(`/permission?limit=7${cursor ? `&cursor=${cursor}` : ''}`);
        expect(res.status).toBe(200);
        seen.push(...res.body.data.map((p: { name: string }) => p.name));
        cursor = res.body.next_cursor ?? undefined;
        if (!cursor) break;
      }
      expect(seen).toEqual([...PERMISSIONS]);
    }
    const all = await t.as({ session }).get('/permission?limit=200');
    expect(all.body.data[0]).toEqual({
      name: 'organization:view',
      resource: 'organization',
      action: 'view',
      description: descriptions['organization:view'],
      person_only: false,
    });
    const byName = new Map(all.body.data.map((p: { name: string; person_only: boolean }) => [p.name, p.person_only]));
    // Every operation needing scim:manage is a person's; organization:view is needed by many that are not.
    expect(byName.get('scim:manage')).toBe(true);
    expect(byName.get('organization:view')).toBe(false);
  });

  it('filters by resource', async () => {
    const org = await t.factories.org();
    const res = await t.as({ token: org.token }).get('/permission?resource=member');
    expect(res.body).toEqual({
      data: [
        { name: 'member:view', resource: 'member', action: 'view', description: descriptions['member:view'], person_only: false },
        { name: 'member:manage', resource: 'member', action: 'manage', description: descriptions['member:manage'], person_only: false },
      ],
      next_cursor: null,
    });
    expect((await t.as({ token: org.token }).get('/permission?resource=nothing')).body).toEqual({ data: [], next_cursor: null });
  });

  it('refuses a foreign cursor and bad parameters', async () => {
    const org = await t.factories.org();
    expectError(await t.as({ token: org.token }).get(`/permission?cursor=${Buffer.from('nope:nope').toString('base64url')}`), 400, 'invalid_cursor');
    expectError(await t.as({ token: org.token }).get('/permission?resource=Bad-Name'), 400, 'validation_failed');
    expectError(await t.as({ token: org.token }).get('/permission?limit=500'), 400, 'validation_failed');
  });
});
