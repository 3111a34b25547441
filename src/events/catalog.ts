export { EVENT_TYPES, type EventDataMap, type EventType } from '../../generated/events';
