import type { OperationId } from '../../generated/operations';
import type { Handlers } from '../http/api';
import { currentUserHandlers } from './current-user/current-user.handlers';
import { healthHandlers } from './health/health.handlers';
import { notificationDestinationsHandlers } from './notification-destinations/notification-destinations.handlers';
import { schemaHandlers } from './schema/schema.handlers';

/** Every operation of the spec has a handler here; the compiler refuses a missing one. */
export const handlers = {
  ...healthHandlers,
  ...schemaHandlers,
  ...currentUserHandlers,
  ...notificationDestinationsHandlers,
} satisfies Handlers;

/** Operations in the contract whose area is not built yet: they answer 501 not_implemented. */
export const notImplemented: ReadonlySet<OperationId> = new Set<OperationId>([]);
