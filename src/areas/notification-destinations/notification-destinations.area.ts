import { webhookUrlContext } from '../../events/senders';
import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import { notificationDeliveries } from './notification-destinations.consumer';
import * as destinations from './notification-destinations.service';

export default defineArea({
  tag: 'Notification destinations',
  handlers: {
    async listNotificationDestinations({ query }, ctx) {
      const page = pageRequest(query, 'notificationDestination');
      return { status: 200, body: await destinations.list(ctx, page, { type: query.type, is_active: query.is_active }) };
    },
    async createNotificationDestination({ body }, ctx) {
      const created = await destinations.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/notification-destination/${created.id}` } };
    },
    async getNotificationDestination({ params }, ctx) {
      return { status: 200, body: await destinations.get(ctx, params.id) };
    },
    async updateNotificationDestination({ params, body }, ctx) {
      return { status: 200, body: await destinations.update(ctx, params.id, body) };
    },
    async deleteNotificationDestination({ params }, ctx) {
      await destinations.remove(ctx, params.id);
      return { status: 204 };
    },
    async listNotificationDeliveries({ params, query }, ctx) {
      const page = pageRequest(query, 'notificationDelivery');
      return { status: 200, body: await destinations.listDeliveries(ctx, params.id, page, { status: query.status, event_type: query.event_type }) };
    },
    async testNotificationDestination({ params }, ctx) {
      return { status: 200, body: await destinations.test(ctx, params.id) };
    },
  },
  consumers: (deps) => [notificationDeliveries(deps)],
  sealed: [{ table: 'notification_destinations', column: 'webhook_url_enc', context: webhookUrlContext }],
});
