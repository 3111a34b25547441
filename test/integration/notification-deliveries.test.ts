import { randomBytes } from 'node:crypto';
import type { components } from '../../generated/openapi';
import { notificationDeliveries } from '../../src/areas/notification-destinations/notification-destinations.consumer';
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from '../../src/events/delivery-queue';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher, type OutboxConsumer, type OutboxEvent } from '../../src/events/outbox';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { usePeers } from '../support/peers';

/*
 * The outbox worker against a real SMTP server and a real HTTP receiver (standing in for
 * Slack), and the delivery log it leaves behind (GET /notification-destination/{id}/delivery).
 * Rounds are run explicitly with a chosen clock, so backoff is tested without waiting.
 */

const peers = usePeers();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { SMTP_URL: peers.smtp.url } });
});
afterAll(() => t.close());

const unique = () => randomBytes(6).toString('hex');
const hookUrl = () => `${peers.receiver.url}/services/T${unique()}/B${unique()}/${unique()}`;
/** The outbox worker with the notification-destination consumer, as the server runs it. */
const dispatcher = (options: Partial<RetryPolicy> = {}, others: OutboxConsumer[] = []) =>
  new OutboxDispatcher(t.db, [notificationDeliveries(t.deps, { ...DEFAULT_RETRY_POLICY, ...options }), ...others], t.deps.logger, {
    ...DEFAULT_OUTBOX_OPTIONS,
    batchSize: options.batchSize ?? DEFAULT_OUTBOX_OPTIONS.batchSize,
  });
const postsTo = (url: string) => peers.receiver.requests.filter((r) => url.endsWith(r.path));

type DeliveryQuery = {
  limit?: number;
  cursor?: string;
  status?: components['schemas']['NotificationDeliveryStatus'];
  event_type?: components['schemas']['EventType'];
};

async function setup() {
  const seeded = await t.factories.org();
  const credential = { token: seeded.token, org: seeded.orgId };
  const client = t.as(credential);
  const api = t.client(credential);
  const create = async (body: components['schemas']['NotificationDestinationCreate']) => {
    const { data, response } = await api.POST('/notification-destination', { body });
    expect(response.status).toBe(201);
    return data!.id;
  };
  const deliveries = async (id: string, query: DeliveryQuery = {}) => {
    const { data, response } = await api.GET('/notification-destination/{id}/delivery', { params: { path: { id }, query } });
    expect(response.status).toBe(200);
    return data as { data: any[]; next_cursor: string | null };
  };
  return { ...seeded, client, api, create, deliveries };
}

const memberJoined = (userId: string) => ({ member: { user_id: userId, email: 'ada@acme.example', name: 'Ada Lovelace' }, via: 'invite' as const });

describe('the outbox worker', () => {
  it('delivers an event once to every active destination subscribed to it, and to no other', async () => {
    const org = await setup();
    const other = await setup();
    const url = hookUrl();
    const email = await org.create({
      name: `Ops ${unique()}`,
      type: 'email',
      config: { to: ['ops@acme.example'], subject_prefix: '[Acme]' },
      event_types: ['member.joined'],
    });
    const slack = await org.create({ name: `Slack ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['member.joined', 'role.created'] });
    const paused = await org.create({
      name: `Paused ${unique()}`,
      type: 'email',
      config: { to: ['paused@acme.example'] },
      event_types: ['member.joined'],
      is_active: false,
    });
    const elsewhere = await org.create({ name: `Roles ${unique()}`, type: 'email', config: { to: ['roles@acme.example'] }, event_types: ['role.created'] });
    const otherOrg = await other.create({ name: `Other ${unique()}`, type: 'email', config: { to: ['other@beta.example'] }, event_types: ['member.joined'] });

    const eventId = await t.factories.event(org.orgId, 'member.joined', memberJoined(org.ownerId), org.ownerId);
    const mailsBefore = peers.smtp.messages.length;
    const round = await dispatcher().runOnce();
    expect(round).toMatchObject({ fannedOut: expect.any(Number), totals: { delivered: 2, retrying: 0, failed: 0 } });

    const mails = peers.smtp.messages.slice(mailsBefore);
    expect(mails.map((m) => m.to)).toEqual([['ops@acme.example']]);
    expect(mails[0]!.raw).toMatch(/Subject: \[Acme\] Someone became an active member/);
    expect(mails[0]!.raw).toContain(eventId);
    const posts = postsTo(url);
    expect(posts).toHaveLength(1);
    expect(JSON.parse(posts[0]!.body).text).toContain('member.joined');

    const log = await org.deliveries(email);
    expect(log.data).toEqual([
      {
        id: expect.stringMatching(/^ndlv_/),
        destination_id: email,
        event: {
          id: eventId,
          type: 'member.joined',
          organization_id: org.orgId,
          occurred_at: expect.any(String),
          actor: { type: 'user', id: org.ownerId },
          data: memberJoined(org.ownerId),
        },
        status: 'delivered',
        attempts: 1,
        last_attempt_at: expect.any(String),
        next_attempt_at: null,
        last_error: null,
        delivered_at: expect.any(String),
        created_at: expect.any(String),
      },
    ]);
    expect((await org.deliveries(slack)).data.map((d) => d.status)).toEqual(['delivered']);
    expect((await org.deliveries(paused)).data).toEqual([]);
    expect((await org.deliveries(elsewhere)).data).toEqual([]);
    expect((await other.deliveries(otherOrg)).data).toEqual([]);

    // A second round finds nothing left to do: nothing is sent twice.
    expect(await dispatcher().runOnce()).toMatchObject({ totals: { delivered: 0, retrying: 0 } });
    expect(postsTo(url)).toHaveLength(1);
  });

  it('retries a failed delivery with exponential backoff, and gives up after the last attempt', async () => {
    const org = await setup();
    const url = hookUrl();
    const slack = await org.create({ name: `Flaky ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['role.deleted'] });
    await t.factories.event(org.orgId, 'role.deleted', { role: { id: newId('role'), name: 'Contractors', permissions: [] } });
    peers.receiver.respondWith({ status: 500, body: 'down' });
    const worker = dispatcher({ maxAttempts: 3 });
    const start = new Date(Date.now() + 1000);

    expect(await worker.runOnce(start)).toMatchObject({ totals: { retrying: 1 } });
    let [entry] = (await org.deliveries(slack)).data;
    expect(entry).toMatchObject({ status: 'pending', attempts: 1, last_error: 'The webhook answered with HTTP status 500.' });
    expect(Date.parse(entry.next_attempt_at) - start.getTime()).toBe(30_000);

    // Not due yet: nothing is sent.
    expect(await worker.runOnce(new Date(start.getTime() + 29_000))).toMatchObject({ totals: { retrying: 0, failed: 0 } });
    expect(postsTo(url)).toHaveLength(1);

    expect(await worker.runOnce(new Date(start.getTime() + 30_000))).toMatchObject({ totals: { retrying: 1 } });
    [entry] = (await org.deliveries(slack)).data;
    expect(entry).toMatchObject({ status: 'pending', attempts: 2 });
    expect(Date.parse(entry.next_attempt_at) - (start.getTime() + 30_000)).toBe(60_000);

    expect(await worker.runOnce(new Date(start.getTime() + 90_000))).toMatchObject({ totals: { failed: 1 } });
    [entry] = (await org.deliveries(slack)).data;
    expect(entry).toMatchObject({ status: 'failed', attempts: 3, next_attempt_at: null, delivered_at: null });
    expect(postsTo(url)).toHaveLength(3);
    expect((await org.deliveries(slack, { status: 'failed' })).data).toHaveLength(1);
    expect((await org.deliveries(slack, { status: 'delivered' })).data).toHaveLength(0);
  });

  it('delivers after a failure once the webhook recovers', async () => {
    const org = await setup();
    const url = hookUrl();
    const slack = await org.create({ name: `Recovers ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['invite.revoked'] });
    await t.factories.event(org.orgId, 'invite.revoked', {
      invite: { id: newId('invite'), email: 'bob@acme.example', role_ids: [], invited_by_user_id: org.ownerId, expires_at: new Date().toISOString() },
    });
    const worker = dispatcher();
    const start = new Date(Date.now() + 1000);
    peers.receiver.respondWith({ status: 503, body: 'busy' });
    expect(await worker.runOnce(start)).toMatchObject({ totals: { retrying: 1 } });
    peers.receiver.respondWith({ status: 200, body: 'ok' });
    expect(await worker.runOnce(new Date(start.getTime() + 30_000))).toMatchObject({ totals: { delivered: 1 } });
    expect((await org.deliveries(slack)).data[0]).toMatchObject({ status: 'delivered', attempts: 2, last_error: null });
  });

  it('skips a destination paused after the event and before its delivery', async () => {
    const org = await setup();
    const url = hookUrl();
    const slack = await org.create({ name: `Paused later ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['role.created'] });
    await t.factories.event(org.orgId, 'role.created', { role: { id: newId('role'), name: 'Auditors', permissions: ['audit_log:view'] } });
    const start = new Date(Date.now() + 1000);
    peers.receiver.respondWith({ status: 500 });
    await dispatcher().runOnce(start);
    expect((await org.client.patch(`/notification-destination/${slack}`, { is_active: false })).status).toBe(200);
    expect(await dispatcher().runOnce(new Date(start.getTime() + 30_000))).toMatchObject({ totals: { skipped: 1 } });
    expect((await org.deliveries(slack)).data[0]).toMatchObject({ status: 'skipped', next_attempt_at: null });
    expect(postsTo(url)).toHaveLength(1);
  });

  it('lets two workers share the queue without sending anything twice', async () => {
    const org = await setup();
    const url = hookUrl();
    await org.create({ name: `Shared ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['connector.created'] });
    for (let i = 0; i < 5; i += 1) {
      await t.factories.event(org.orgId, 'connector.created', { connector: { slug: `crm-${i}`, name: `CRM ${i}`, version: '1' }, forked_from: null });
    }
    peers.receiver.respondWith({ status: 200, body: 'ok', delayMs: 50 });
    const [a, b] = await Promise.all([dispatcher({ batchSize: 3 }).runOnce(), dispatcher({ batchSize: 3 }).runOnce()]);
    await dispatcher().runOnce();
    expect(postsTo(url)).toHaveLength(5);
    expect((a.totals.delivered ?? 0) + (b.totals.delivered ?? 0)).toBeLessThanOrEqual(5);
  });

  it('hands every event once to each consumer, and one consumer failing its round does not stop another', async () => {
    const org = await setup();
    const url = hookUrl();
    await org.create({ name: `Beside ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['role.updated'] });
    const logged: OutboxEvent[] = [];
    const logging: OutboxConsumer = {
      name: 'log-export',
      fanOut: async (_trx, events) => {
        logged.push(...events.filter((e) => e.org_id === org.orgId));
      },
      deliver: async () => {
        throw new Error('the log backend is down');
      },
    };
    const ids = [
      await t.factories.event(org.orgId, 'role.updated', { role: { id: newId('role'), name: 'Ops', permissions: [] }, changed: ['name'] }),
      await t.factories.event(org.orgId, 'member.joined', memberJoined(org.ownerId), org.ownerId),
    ];
    const round = await dispatcher({}, [logging]).runOnce();
    await dispatcher({}, [logging]).runOnce();
    expect(logged.map((e) => e.id)).toEqual(ids);
    expect(round.consumers).toEqual({ 'notification-destinations': expect.objectContaining({ delivered: 1 }) });
    expect(postsTo(url)).toHaveLength(1);
  });

  it('does not hold one organization’s notifications behind another’s slow endpoint', async () => {
    const slowOrg = await setup();
    const fastOrg = await setup();
    const slowUrl = hookUrl();
    const fastUrl = hookUrl();
    await slowOrg.create({ name: `Slow ${unique()}`, type: 'slack', config: { webhook_url: slowUrl }, event_types: ['restriction.updated'] });
    const fast = await fastOrg.create({ name: `Fast ${unique()}`, type: 'slack', config: { webhook_url: fastUrl }, event_types: ['restriction.updated'] });
    const restriction = { restriction: { id: newId('restriction'), name: 'No deletes', effect: 'deny' as const }, change: 'created' as const };
    // The slow organization's event comes first in the queue.
    await t.factories.event(slowOrg.orgId, 'restriction.updated', restriction);
    await t.factories.event(fastOrg.orgId, 'restriction.updated', restriction);
    peers.receiver.respondWith({ status: 200, drip: { everyMs: 100, forMs: 10_000 }, onlyFor: new URL(slowUrl).pathname });

    const round = await dispatcher().runOnce();

    expect(round.totals).toMatchObject({ delivered: 1, retrying: 1 });
    const [fastRequest] = postsTo(fastUrl);
    // Sent while the slow endpoint was still dripping its answer, not after its deadline.
    expect(fastRequest?.alongside).toBeGreaterThanOrEqual(1);
    expect((await fastOrg.deliveries(fast)).data[0]).toMatchObject({ status: 'delivered' });
  });

  it('sends a busy destination its backlog in back-to-back rounds, each round giving the others their share first', async () => {
    const busyOrg = await setup();
    const quietOrg = await setup();
    const busyUrl = hookUrl();
    const quietUrl = hookUrl();
    const event = { role: { id: newId('role'), name: 'Platform', permissions: [] } };
    await busyOrg.create({ name: `Busy ${unique()}`, type: 'slack', config: { webhook_url: busyUrl }, event_types: ['role.created'] });
    await quietOrg.create({ name: `Quiet ${unique()}`, type: 'slack', config: { webhook_url: quietUrl }, event_types: ['role.created'] });
    for (let i = 0; i < 8; i += 1) await t.factories.event(busyOrg.orgId, 'role.created', event);
    await t.factories.event(quietOrg.orgId, 'role.created', event);

    // A round sends each destination at most its share (3), in order, and says more is due.
    const worker = dispatcher();
    const first = await worker.runOnce();
    expect(first).toMatchObject({ more: true, consumers: { 'notification-destinations': expect.objectContaining({ delivered: 4 }) } });
    expect([postsTo(busyUrl).length, postsTo(quietUrl).length]).toEqual([3, 1]);
    expect(await worker.runOnce()).toMatchObject({ more: true });
    const last = await worker.runOnce();
    expect(last).toMatchObject({ more: false, consumers: { 'notification-destinations': expect.objectContaining({ delivered: 2 }) } });
    expect(postsTo(busyUrl)).toHaveLength(8);
  });

  it('delivers a backlog without waiting a poll per share when it runs on a timer', async () => {
    const org = await setup();
    const url = hookUrl();
    await org.create({ name: `Backlog ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['role.deleted'] });
    for (let i = 0; i < 10; i += 1) await t.factories.event(org.orgId, 'role.deleted', { role: { id: newId('role'), name: `Role ${i}`, permissions: [] } });
    const worker = dispatcher();
    // An hour between polls: everything arrives in the rounds that start runs at once and that
    // a backlog chains right after, or not before this test gives up.
    worker.start(3_600_000);
    try {
      for (let i = 0; i < 500 && postsTo(url).length < 10; i += 1) await new Promise((r) => setTimeout(r, 10));
    } finally {
      await worker.stop();
    }
    expect(postsTo(url)).toHaveLength(10);
  });

  it('runs by itself on a timer and stops cleanly', async () => {
    const org = await setup();
    const url = hookUrl();
    await org.create({ name: `Timer ${unique()}`, type: 'slack', config: { webhook_url: url }, event_types: ['org_domain.verified'] });
    await t.factories.event(org.orgId, 'org_domain.verified', { org_domain: { id: newId('orgDomain'), domain: 'acme.example' } });
    const worker = dispatcher();
    worker.start(20);
    for (let i = 0; i < 200 && postsTo(url).length === 0; i += 1) await new Promise((r) => setTimeout(r, 10));
    await worker.stop();
    expect(postsTo(url)).toHaveLength(1);
  });
});

describe('listNotificationDeliveries', () => {
  it('pages newest first and refuses what it must', async () => {
    const org = await setup();
    const email = await org.create({ name: `Paged ${unique()}`, type: 'email', config: { to: ['ops@acme.example'] }, event_types: ['member.removed'] });
    const ids: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      ids.push(
        await t.factories.event(org.orgId, 'member.removed', { member: { user_id: org.ownerId, email: `m${i}@acme.example`, name: null }, status: 'removed' }),
      );
    }
    await dispatcher().runOnce();
    const first = await org.deliveries(email, { limit: 2 });
    expect(first.data.map((d) => d.event.id)).toEqual([ids[2], ids[1]]);
    const second = await org.deliveries(email, { limit: 2, cursor: first.next_cursor! });
    expect(second.data.map((d) => d.event.id)).toEqual([ids[0]]);
    expect(second.next_cursor).toBeNull();
    expect((await org.deliveries(email, { event_type: 'role.created' })).data).toEqual([]);

    const bad = await org.client.get(`/notification-destination/${email}/delivery?status=sent`);
    expect([bad.status, bad.body.code]).toEqual([400, 'validation_failed']);
    const cursor = await org.client.get(`/notification-destination/${email}/delivery?cursor=${Buffer.from(email).toString('base64url')}`);
    expect([cursor.status, cursor.body.code]).toEqual([400, 'invalid_cursor']);

    const other = await setup();
    const foreign = await other.client.get(`/notification-destination/${email}/delivery`);
    expect([foreign.status, foreign.body.code]).toEqual([404, 'not_found']);
    const viewer = await t.factories.token(org.orgId, org.ownerId, ['role:view']);
    const refused = await t.as({ token: viewer, org: org.orgId }).get(`/notification-destination/${email}/delivery`);
    expect([refused.status, refused.body.code]).toEqual([403, 'missing_permission']);

    // Deleting the destination deletes its log with it.
    expect((await org.client.delete(`/notification-destination/${email}`)).status).toBe(204);
    expect(await t.db.selectFrom('notification_deliveries').select('id').where('destination_id', '=', email).execute()).toEqual([]);
  });
});
