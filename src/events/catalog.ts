import type { components } from '../../generated/openapi';
import { loadSpec } from '../spec';

export type EventType = components['schemas']['EventType'];

/** The event catalog, in the spec's order. */
export const EVENT_TYPES: readonly EventType[] = loadSpec().components.schemas.EventType.enum as EventType[];
