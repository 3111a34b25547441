import { sql } from 'kysely';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { connectionClient } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';
import { mintMcpServer } from '../support/mcp';

/*
 * What an MCP server serves is remembered per process (src/areas/user-toolboxes/served-tools.ts)
 * and forgotten on every change: announced by the database's triggers (whoever committed it),
 * at once after this process's own commits, and at a live exception's expiry. The changes
 * "made elsewhere" here go through the raw database handle, which, unlike `t.db`, does not
 * make the app forget: only the notification tells it.
 */

const KEY = 'key-alice-Sv4Tq8';
const crmPeer = useUpstream(() => startApiKeyUpstream({ keys: { [KEY]: 'alice' }, tools: [{ name: 'delete_record', description: 'Deletes a record.' }] }));

let t: TestApp;
let org: SeededOrg;
let aliceId: string;
let aliceToken: string;
let crm: string;
let connectionId: string;
let server: { id: string; token: string };

const rpc = (target: { id: string; token: string }, method: string, params: object = {}) =>
  fetch(`${t.url}/mcp/${target.id}`, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${target.token}`,
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': '2025-06-18',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  }).then(async (res) => {
    expect(res.status).toBe(200);
    return (await res.json()) as { result?: { tools?: { name: string }[]; isError?: boolean; content?: { text: string }[] }; error?: { code: number } };
  });

const names = async (target = server) => ((await rpc(target, 'tools/list')).result?.tools ?? []).map((tool) => tool.name);
const call = (name: string, target = server) => rpc(target, 'tools/call', { name, arguments: { text: 'hi' } });

/** Waits until the app has heard at least one more change notification than `before`. */
async function notified(app: TestApp, before: number): Promise<void> {
  for (let i = 0; i < 200 && app.deps.mcp.servedTools.clears <= before; i += 1) await new Promise((resolve) => setTimeout(resolve, 25));
  expect(app.deps.mcp.servedTools.clears).toBeGreaterThan(before);
}

/** Changes the connection's status where no trigger sees it (replica mode): nothing is announced. */
async function setStatusUnannounced(app: TestApp, status: 'active' | 'disconnected') {
  await app.database.db.transaction().execute(async (trx) => {
    await sql`set local session_replication_role = replica`.execute(trx);
    await trx.updateTable('connections').set({ status }).where('id', '=', connectionId).execute();
  });
}

const mint = (app: TestApp, token: string, name: string) => mintMcpServer(app, { token, org: org.orgId }, { name });

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  aliceId = await t.factories.member(org.orgId);
  aliceToken = await t.factories.token(org.orgId, aliceId);
  const apiKey = { type: 'api_key' as const, placement: 'header' as const, name: 'Authorization', value_prefix: 'Bearer ' };
  crm = await customConnector(t, org.orgId, { slug: 'crm', name: 'Acme CRM', mcp_url: `${new URL(crmPeer.peer.url).origin}/mcp`, auth: apiKey });
  const created = await connectionClient(t, { token: aliceToken, org: org.orgId }).create({ connector_slug: crm, api_key: KEY });
  expect(created.status).toBe(201);
  connectionId = created.body.id;
  server = await mint(t, aliceToken, 'Alice all');
  // The cache is trusted once the listener has heard a notification (the connection's insert sent one).
  await notified(t, 0);
}, 60_000);
afterAll(() => t.close());

describe('what an MCP server serves', () => {
  it('is remembered between calls until a change is announced, whoever made it', async () => {
    expect(await names()).toContain('crm__echo');
    await setStatusUnannounced(t, 'disconnected');
    // Nothing announced the change: the remembered tools are still served.
    expect(await names()).toContain('crm__echo');
    const before = t.deps.mcp.servedTools.clears;
    await sql`select pg_notify('cp_served_tools', ${org.orgId})`.execute(t.database.db);
    await notified(t, before);
    expect(await names()).not.toContain('crm__echo');
    await setStatusUnannounced(t, 'active');
    await sql`select pg_notify('cp_served_tools', '')`.execute(t.database.db);
    await notified(t, before + 1);
    expect(await names()).toContain('crm__echo');
  });

  it('forgets only the organization a change names', async () => {
    const other = await t.factories.org();
    expect(await names()).toContain('crm__echo');
    await setStatusUnannounced(t, 'disconnected');
    // A restriction committed in another organization: its notification names that one.
    const before = t.deps.mcp.servedTools.clears;
    await t.database.db
      .insertInto('restrictions')
      .values({
        id: newId('restriction'),
        org_id: other.orgId,
        name: 'Elsewhere',
        effect: 'deny',
        match_connector_slug: 'crm',
        match_tool_pattern: 'echo',
        applies_to_everyone: true,
        is_active: true,
      })
      .execute();
    await notified(t, before);
    expect(await names()).toContain('crm__echo');
    // One naming this organization forgets its servers.
    await sql`select pg_notify('cp_served_tools', ${org.orgId})`.execute(t.database.db);
    await notified(t, before + 1);
    expect(await names()).not.toContain('crm__echo');
    await setStatusUnannounced(t, 'active');
    await sql`select pg_notify('cp_served_tools', '')`.execute(t.database.db);
    await notified(t, before + 2);
    expect(await names()).toContain('crm__echo');
  });

  it('forgets only the acting organization after a write of its own through the API', async () => {
    const other = await t.factories.org();
    expect(await names()).toContain('crm__echo');
    await setStatusUnannounced(t, 'disconnected');
    // A write in another organization: neither this process's commit nor the trigger's notification names this one.
    const before = t.deps.mcp.servedTools.clears;
    expect((await t.as({ token: other.token, org: other.orgId }).post('/team', { name: 'Elsewhere' })).status).toBe(201);
    await notified(t, before);
    expect(await names()).toContain('crm__echo');
    // A write in this organization: forgotten before its response leaves.
    expect((await t.as({ token: org.token, org: org.orgId }).post('/team', { name: 'Here' })).status).toBe(201);
    expect(await names()).not.toContain('crm__echo');
    await setStatusUnannounced(t, 'active');
    const cleared = t.deps.mcp.servedTools.clears;
    await sql`select pg_notify('cp_served_tools', '')`.execute(t.database.db);
    await notified(t, cleared);
    expect(await names()).toContain('crm__echo');
  });

  it('hears a restriction another process commits through the table’s trigger', async () => {
    expect(await names()).toContain('crm__echo');
    const before = t.deps.mcp.servedTools.clears;
    await t.database.db
      .insertInto('restrictions')
      .values({
        id: newId('restriction'),
        org_id: org.orgId,
        name: 'No echo (elsewhere)',
        effect: 'deny',
        match_connector_slug: crm,
        match_tool_pattern: 'echo',
        applies_to_everyone: true,
        is_active: true,
      })
      .execute();
    await notified(t, before);
    expect(await names()).not.toContain('crm__echo');
    expect((await call('crm__echo')).error?.code).toBe(-32602);
    await t.database.db.deleteFrom('restrictions').where('org_id', '=', org.orgId).execute();
    await notified(t, before + 1);
    expect(await names()).toContain('crm__echo');
  });

  it('sees a change made through the API on the very next call', async () => {
    expect((await call('crm__echo')).result?.isError).toBeFalsy();
    const admin = t.as({ token: org.token, org: org.orgId });
    const denied = await admin.post('/restriction', {
      name: 'No echo',
      match: { connector_slug: crm, tool_pattern: 'echo' },
      effect: 'deny',
      applies_to: { everyone: true },
    });
    expect(denied.status).toBe(201);
    expect((await call('crm__echo')).error?.code).toBe(-32602);
    expect((await admin.delete(`/restriction/${denied.body.id}`)).status).toBe(204);
    expect((await call('crm__echo')).result?.isError).toBeFalsy();
  });

  it('holds a tool again when its exception expires, with no change to announce it', async () => {
    const admin = t.as({ token: org.token, org: org.orgId });
    const hold = await admin.post('/restriction', {
      name: 'Deletes need approval',
      match: { connector_slug: crm, tool_pattern: 'delete_*' },
      effect: 'require_approval',
      applies_to: { everyone: true },
    });
    expect(hold.status).toBe(201);
    const held = await call('crm__delete_record');
    expect(held.result?.isError).toBe(true);
    expect(held.result?.content?.[0]?.text).toContain(hold.body.id);
    // An approved exception for a moment, committed beside the app: the notification tells it.
    const expiresAt = new Date(Date.now() + 1500);
    const announced = t.deps.mcp.servedTools.clears;
    await t.database.db
      .insertInto('access_requests')
      .values({
        id: newId('accessRequest'),
        org_id: org.orgId,
        requester_user_id: aliceId,
        restriction_id: hold.body.id,
        connector_slug: crm,
        tool_name: 'delete_record',
        reason: 'cleanup',
        status: 'approved',
        resolved_at: new Date(),
        resolved_by_user_id: org.ownerId,
        exception_expires_at: expiresAt,
      })
      .execute();
    await notified(t, announced);
    const before = t.deps.mcp.servedTools.clears;
    expect((await call('crm__delete_record')).result?.isError).toBeFalsy();
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, expiresAt.getTime() - Date.now()) + 100));
    const after = await call('crm__delete_record');
    expect(after.result?.isError).toBe(true);
    expect(after.result?.content?.[0]?.text).toContain(hold.body.id);
    // Nothing was announced in between: the expiry alone ended what was remembered.
    expect(t.deps.mcp.servedTools.clears).toBe(before);
    expect((await admin.delete(`/restriction/${hold.body.id}`)).status).toBe(204);
  });

  it('writes one tool-call record per call when many calls share a batch', async () => {
    const busy = await mint(t, aliceToken, 'Alice busy');
    const results = await Promise.all(Array.from({ length: 40 }, () => call('crm__echo', busy)));
    expect(results.every((r) => r.result !== undefined && !r.result.isError)).toBe(true);
    const read = () => t.db.selectFrom('tool_call_records').select(['request_id', 'outcome']).where('mcp_server_id', '=', busy.id).execute();
    let rows = await read();
    for (let i = 0; i < 200 && rows.length < 40; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      rows = await read();
    }
    expect(rows).toHaveLength(40);
    expect(new Set(rows.map((r) => r.request_id)).size).toBe(40);
    expect(rows.every((r) => r.outcome === 'succeeded')).toBe(true);
  });
});

describe('with MCP_SERVED_TOOLS_CACHE_SECONDS=0', () => {
  it('reads what a server serves on every call', async () => {
    const uncached = await startTestApp({ env: { MCP_SERVED_TOOLS_CACHE_SECONDS: '0' } });
    try {
      const o = await uncached.factories.org();
      const member = await uncached.factories.member(o.orgId);
      const token = await uncached.factories.token(o.orgId, member);
      const apiKey = { type: 'api_key' as const, placement: 'header' as const, name: 'Authorization', value_prefix: 'Bearer ' };
      const slug = await customConnector(uncached, o.orgId, {
        slug: 'crm',
        name: 'Acme CRM',
        mcp_url: `${new URL(crmPeer.peer.url).origin}/mcp`,
        auth: apiKey,
      });
      const created = await connectionClient(uncached, { token, org: o.orgId }).create({ connector_slug: slug, api_key: KEY });
      expect(created.status).toBe(201);
      const res = await uncached.as({ token, org: o.orgId }).post('/user-toolbox/utbx_dyn_all/mcp', { name: 'Uncached' });
      expect(res.status).toBe(201);
      const target = { id: res.body.mcp_server.id as string, token: res.body.token as string };
      const list = async () =>
        (
          (await (
            await fetch(`${uncached.url}/mcp/${target.id}`, {
              method: 'POST',
              headers: {
                Authorization: `Bearer ${target.token}`,
                'Content-Type': 'application/json',
                Accept: 'application/json, text/event-stream',
                'MCP-Protocol-Version': '2025-06-18',
              },
              body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
            })
          ).json()) as { result: { tools: { name: string }[] } }
        ).result.tools.map((tool) => tool.name);
      expect(await list()).toContain('crm__echo');
      await uncached.database.db.transaction().execute(async (trx) => {
        await sql`set local session_replication_role = replica`.execute(trx);
        await trx.updateTable('connections').set({ status: 'disconnected' }).where('id', '=', created.body.id).execute();
      });
      expect(await list()).not.toContain('crm__echo');
    } finally {
      await uncached.close();
    }
  }, 60_000);
});
