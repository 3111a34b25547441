import type { Migration } from 'kysely';
import * as foundation from './2026_11_22_0001_foundation';
import * as rateLimits from './2026_11_22_0002_rate_limits';
import * as notificationDeliveries from './2026_11_23_0003_notification_deliveries';

/**
 * Every migration, in order. An explicit list instead of a folder scan, so the same code
 * runs from TypeScript sources, compiled output and Jest alike.
 */
export const migrations: Record<string, Migration> = {
  '2026_11_22_0001_foundation': foundation,
  '2026_11_22_0002_rate_limits': rateLimits,
  '2026_11_23_0003_notification_deliveries': notificationDeliveries,
};
