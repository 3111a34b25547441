import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import { loggingDeliveries, senderFor } from './logging-destinations.consumer';
import { secretsContext } from './logging-destinations.sender';
import * as destinations from './logging-destinations.service';

export default defineArea({
  tag: 'Logging destinations',
  handlers: {
    async listLoggingDestinations({ query }, ctx) {
      const page = pageRequest(query, 'loggingDestination');
      return { status: 200, body: await destinations.list(ctx, page, { type: query.type, record_type: query.record_type, is_active: query.is_active }) };
    },
    async createLoggingDestination({ body }, ctx) {
      const created = await destinations.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/observability-destination/${created.id}` } };
    },
    async getLoggingDestination({ params }, ctx) {
      return { status: 200, body: await destinations.get(ctx, params.id) };
    },
    async updateLoggingDestination({ params, body }, ctx) {
      return { status: 200, body: await destinations.update(ctx, params.id, body) };
    },
    async deleteLoggingDestination({ params }, ctx) {
      await destinations.remove(ctx, params.id);
      return { status: 204 };
    },
    async testLoggingDestination({ params }, ctx) {
      return { status: 200, body: await destinations.test(ctx, params.id) };
    },
  },
  consumers: (deps) => [loggingDeliveries(deps)],
  sealed: [{ table: 'logging_destinations', column: 'secrets_enc', context: secretsContext }],
  stop: async (deps) => senderFor(deps).close(),
});
