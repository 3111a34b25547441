import type { Transaction } from 'kysely';
import type { Database } from '../../db/schema';
import { deliverDue, DEFAULT_RETRY_POLICY, type RetryPolicy } from '../../events/delivery-queue';
import { eventBody, type OutboxConsumer } from '../../events/outbox';
import { sendToDestination, type DestinationConfig } from '../../events/senders';
import type { AppDeps } from '../../http/context';
import { newId } from '../../lib/ids';
import { loadSpec } from '../../spec';

const eventTitles = loadSpec().components.schemas.EventType['x-enumDescriptions'] as Record<string, string>;

function render(event: ReturnType<typeof eventBody>, orgName: string): { subject: string; text: string } {
  const title = eventTitles[event.type] ?? event.type;
  return {
    subject: title,
    text: [
      title,
      '',
      `Organization: ${orgName} (${event.organization_id})`,
      `Event: ${event.type} (${event.id})`,
      `When: ${event.occurred_at}`,
      `By: ${event.actor.type === 'user' ? `user ${event.actor.id}` : event.actor.type}`,
      '',
      JSON.stringify(event.data, null, 2),
    ].join('\n'),
  };
}

/** Every claimed delivery with its destination, its event and its organization's name. */
function load(trx: Transaction<Database>, ids: string[]) {
  return trx
    .selectFrom('notification_deliveries as nd')
    .innerJoin('notification_destinations as d', 'd.id', 'nd.destination_id')
    .innerJoin('outbox as o', 'o.id', 'nd.event_id')
    .innerJoin('organizations as org', 'org.id', 'nd.org_id')
    .select([
      'nd.id',
      'nd.org_id',
      'nd.attempts',
      'org.name as org_name',
      'd.id as destination_id',
      'd.type',
      'd.config',
      'd.webhook_url_enc',
      'd.is_active',
      'd.event_types',
      'o.id as event_id',
      'o.event_type',
      'o.payload',
      'o.created_at',
      'o.actor_type',
      'o.actor_id',
    ])
    .where('nd.id', 'in', ids)
    .orderBy('nd.id')
    .execute();
}

/**
 * Delivers organization events to notification destinations: one delivery row per event and
 * active destination subscribed to it, sent by Slack or email with retries (the delivery log
 * of GET /notification-destination/{id}/delivery shows them).
 */
export function notificationDeliveries(deps: AppDeps, policy: RetryPolicy = DEFAULT_RETRY_POLICY): OutboxConsumer {
  const sending = { mailer: deps.mailer, secrets: deps.secrets, outbound: deps.config.outbound };
  return {
    name: 'notification-destinations',
    async fanOut(trx, events, now) {
      const destinations = await trx
        .selectFrom('notification_destinations')
        .select(['id', 'org_id', 'event_types'])
        .where('org_id', 'in', [...new Set(events.map((e) => e.org_id))])
        .where('is_active', '=', true)
        .execute();
      const rows = events.flatMap((event) =>
        destinations
          .filter((d) => d.org_id === event.org_id && d.event_types.includes(event.event_type))
          .map((d) => ({ id: newId('notificationDelivery'), org_id: event.org_id, destination_id: d.id, event_id: event.id, next_attempt_at: now })),
      );
      if (rows.length > 0) {
        await trx
          .insertInto('notification_deliveries')
          .values(rows)
          .onConflict((oc) => oc.columns(['event_id', 'destination_id']).doNothing())
          .execute();
      }
    },
    deliver: (now) =>
      deliverDue(
        deps.db,
        {
          table: 'notification_deliveries',
          recipient: 'destination_id',
          recipientOf: (delivery) => delivery.destination_id,
          policy,
          load,
          async send(delivery) {
            // Paused or unsubscribed since the event: the destination forwards nothing.
            if (!delivery.is_active || !delivery.event_types.includes(delivery.event_type)) return 'skipped';
            const target = {
              id: delivery.destination_id,
              type: delivery.type,
              config: delivery.config as unknown as DestinationConfig,
              webhook_url_enc: delivery.webhook_url_enc,
            };
            const outcome = await sendToDestination(sending, target, render(eventBody({ ...delivery, id: delivery.event_id }), delivery.org_name));
            deps.metrics.destinationDelivery('notification', delivery.type, outcome.status === 'ok' ? 'delivered' : 'failed');
            if (outcome.status === 'failed') {
              deps.logger.warn(
                { delivery_id: delivery.id, destination_id: delivery.destination_id, attempt: delivery.attempts, reason: outcome.detail ?? outcome.error },
                'notification not delivered',
              );
            }
            return outcome;
          },
        },
        now,
      ),
  };
}
