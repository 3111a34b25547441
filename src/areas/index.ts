import type { OperationId } from '../../generated/operations';
import type { Handlers } from '../http/api';
import { notImplementedError } from '../http/errors';
import { currentUserHandlers } from './current-user/current-user.handlers';
import { healthHandlers } from './health/health.handlers';
import { notificationDestinationsHandlers } from './notification-destinations/notification-destinations.handlers';
import { NOT_IMPLEMENTED } from './not-implemented';
import { schemaHandlers } from './schema/schema.handlers';

const implemented = {
  ...healthHandlers,
  ...schemaHandlers,
  ...currentUserHandlers,
  ...notificationDestinationsHandlers,
};

type Implemented = keyof typeof implemented;
type Pending = (typeof NOT_IMPLEMENTED)[number];

// An operation is either built or listed as not built, never both: this line stops compiling
// when a handler is added without taking its operation off NOT_IMPLEMENTED.
const builtAndPending: [Extract<Implemented, Pending>] extends [never] ? true : Extract<Implemented, Pending> = true;
void builtAndPending;

/** Stands in for an operation whose area is not built; the router answers 501 before reaching it. */
function pending(operationId: OperationId) {
  return async (): Promise<never> => {
    throw notImplementedError(operationId);
  };
}

const stubs = Object.fromEntries(NOT_IMPLEMENTED.map((id) => [id, pending(id)])) as unknown as { [K in Pending]: Handlers[K] };

/** Every operation of the spec has a handler here; the compiler refuses a missing one. */
export const handlers = { ...implemented, ...stubs } satisfies Handlers;

/** Operations in the contract whose area is not built yet: they answer 501 not_implemented. */
export const notImplemented: ReadonlySet<OperationId> = new Set<OperationId>(NOT_IMPLEMENTED);
