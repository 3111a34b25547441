import { randomBytes } from 'node:crypto';
import { notificationDeliveries } from '../../src/areas/notification-destinations/notification-destinations.consumer';
import { DEFAULT_RETRY_POLICY } from '../../src/events/delivery-queue';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from '../../src/events/outbox';
import type { TestApp } from './app';
import type { startHttpReceiver } from './peers';

type Receiver = Awaited<ReturnType<typeof startHttpReceiver>>;

/**
 * An event's way out, end to end: a Slack-type notification destination of the organization
 * (created over HTTP) pointing at the webhook receiver on loopback, subscribed to `types`.
 * `deliver()` runs the outbox worker once, as the server does, and answers the data of each
 * event of those types that reached the receiver at this destination's URL.
 */
export async function webhookSubscription(t: TestApp, receiver: Receiver, org: { orgId: string; token: string }, types: string[]) {
  const path = `/services/T${randomBytes(4).toString('hex')}/B${randomBytes(4).toString('hex')}/${randomBytes(6).toString('hex')}`;
  const res = await t.as({ token: org.token, org: org.orgId }).post('/notification-destination', {
    name: `Hook ${randomBytes(4).toString('hex')}`,
    type: 'slack',
    config: { webhook_url: `${receiver.url}${path}` },
    event_types: types,
  });
  if (res.status !== 201) throw new Error(`notification destination: ${res.status} ${res.text}`);
  return {
    async deliver(): Promise<{ type: string; data: any }[]> {
      const worker = new OutboxDispatcher(t.db, [notificationDeliveries(t.deps, DEFAULT_RETRY_POLICY)], t.deps.logger, DEFAULT_OUTBOX_OPTIONS, t.deps.metrics);
      // Other tests' events share the outbox: rounds until nothing is left to fan out or send.
      for (let round = 0; round < 100; round++) {
        const r = await worker.runOnce();
        if (r.fannedOut === 0 && !Object.values(r.totals).some((count) => count > 0)) break;
      }
      return receiver.requests
        .filter((r) => r.path === path)
        .map((r) => {
          const text = JSON.parse(r.body).text as string;
          const type = /Event: (\S+) \(/.exec(text)?.[1] ?? '';
          return { type, data: JSON.parse(text.slice(text.indexOf('\n{') + 1)) };
        });
    },
  };
}
