import type { components } from '../../generated/openapi';
import type { Executor } from '../db/database';
import { ApiError } from '../http/errors';

/**
 * What each plan allows, as data: features it turns on and quotas. The plan in force is
 * `organizations.plan` (default `free`); a plan name this table does not know gets the free
 * plan's terms. Billing moves organizations between plans; the numbers live here.
 */
export type Feature = keyof components['schemas']['EntitlementFeatures'];
export type LimitKey = keyof components['schemas']['EntitlementLimits'];

export interface Plan {
  features: Readonly<Record<Feature, boolean>>;
  /** null: no limit. */
  limits: Readonly<Record<LimitKey, number | null>>;
  auditLogRetentionDays: number | null;
}

const GiB = 1024 ** 3;

export const PLANS: Readonly<Record<string, Plan>> = {
  free: {
    features: {
      sso: false,
      scim: false,
      audit_log_export: false,
      custom_roles: true,
      custom_connectors: true,
      synthetic_tools: true,
      restrictions: true,
      logging_destinations: false,
      org_domains: true,
    },
    limits: {
      seats: 1000,
      connections: 100,
      mcp_servers: 1000,
      custom_connectors: 10,
      toolboxes: 1000,
      synthetic_tools: 1000,
      file_storage_bytes: 10 * GiB,
    },
    auditLogRetentionDays: 90,
  },
  team: {
    features: {
      sso: false,
      scim: false,
      audit_log_export: false,
      custom_roles: true,
      custom_connectors: true,
      synthetic_tools: true,
      restrictions: true,
      logging_destinations: false,
      org_domains: true,
    },
    limits: {
      seats: 1000,
      connections: 1000,
      mcp_servers: 1000,
      custom_connectors: 100,
      toolboxes: 1000,
      synthetic_tools: 1000,
      file_storage_bytes: 100 * GiB,
    },
    auditLogRetentionDays: 365,
  },
  enterprise: {
    features: {
      sso: true,
      scim: true,
      audit_log_export: true,
      custom_roles: true,
      custom_connectors: true,
      synthetic_tools: true,
      restrictions: true,
      logging_destinations: true,
      org_domains: true,
    },
    limits: {
      seats: null,
      connections: null,
      mcp_servers: null,
      custom_connectors: null,
      toolboxes: null,
      synthetic_tools: null,
      file_storage_bytes: null,
    },
    auditLogRetentionDays: null,
  },
};

export const DEFAULT_PLAN = 'free';

/** The plan's name and terms for an organization. */
export async function planOf(db: Executor, orgId: string): Promise<{ name: string; plan: Plan }> {
  const row = await db.selectFrom('organizations').select('plan').where('id', '=', orgId).executeTakeFirst();
  const name = row?.plan ?? DEFAULT_PLAN;
  return { name, plan: PLANS[name] ?? (PLANS[DEFAULT_PLAN] as Plan) };
}

/** 403 `entitlement_exceeded` unless the organization's plan turns `feature` on. */
export async function requireFeature(db: Executor, orgId: string, feature: Feature): Promise<void> {
  const { name, plan } = await planOf(db, orgId);
  if (!plan.features[feature]) {
    throw new ApiError('entitlement_exceeded', `The ${name} plan does not include ${feature}; change the plan to use it.`);
  }
}

/** Statuses of a subscription under which the paid plan, and the seats it pays for, are in force (features stay on while a payment is retried). */
export const SUBSCRIPTION_IN_FORCE = ['trialing', 'active', 'past_due'] as const;

/**
 * Each limit in force, and where it comes from: the plan's, except `seats`, which is also
 * capped by the seats a paid subscription in force pays for (its quantity, read from the
 * payment provider): the tighter of the two holds.
 */
export async function limitsOf(
  db: Executor,
  orgId: string,
): Promise<{ name: string; plan: Plan; limits: Record<LimitKey, number | null>; seatsBought: number | null }> {
  const [{ name, plan }, billing] = await Promise.all([
    planOf(db, orgId),
    db
      .selectFrom('organization_billing')
      .select('seat_limit')
      .where('org_id', '=', orgId)
      .where('status', 'in', [...SUBSCRIPTION_IN_FORCE])
      .executeTakeFirst(),
  ]);
  const seatsBought = billing?.seat_limit ?? null;
  const planSeats = plan.limits.seats;
  const seats = seatsBought === null ? planSeats : planSeats === null ? seatsBought : Math.min(planSeats, seatsBought);
  return { name, plan, limits: { ...plan.limits, seats }, seatsBought };
}

/**
 * 403 `entitlement_exceeded` unless one more fits. `count` tells how many there are now,
 * before the one being added (it may exceed the limit after a downgrade; then nothing new
 * fits). In a write's transaction, the organization's row is locked first (FOR NO KEY
 * UPDATE: inserts that merely reference it are not held up) and the count taken after, so
 * that concurrent creates each count the others' that committed: without it, several could
 * all count limit-1 and all insert. The lock holds until the transaction ends, past the insert.
 */
export async function requireWithinLimit(db: Executor, orgId: string, limit: LimitKey, count: () => Promise<number>): Promise<void> {
  if (db.isTransaction) await db.selectFrom('organizations').select('id').where('id', '=', orgId).forNoKeyUpdate().executeTakeFirst();
  const [{ name, limits, seatsBought }, used] = await Promise.all([limitsOf(db, orgId), count()]);
  const max = limits[limit];
  if (max === null || used < max) return;
  if (limit === 'seats' && seatsBought === max) {
    throw new ApiError(
      'entitlement_exceeded',
      `The subscription pays for ${max} seats; ${used} are taken. Add seats in the customer portal (POST /organization/{id}/billing/portal), or free one.`,
    );
  }
  throw new ApiError('entitlement_exceeded', `The ${name} plan allows ${max} ${limit.replace(/_/g, ' ')}; ${used} exist. Delete some or change the plan.`);
}

/**
 * 403 `entitlement_exceeded` unless `adding` more of a quantity measured in bytes fits:
 * `used()` (what is stored now) plus `adding` at most the limit. Under the organization's
 * lock in a write's transaction, as requireWithinLimit.
 */
export async function requireBytesWithin(db: Executor, orgId: string, limit: LimitKey, adding: number, used: () => Promise<number>): Promise<void> {
  if (db.isTransaction) await db.selectFrom('organizations').select('id').where('id', '=', orgId).forNoKeyUpdate().executeTakeFirst();
  const [{ name, limits }, now] = await Promise.all([limitsOf(db, orgId), used()]);
  const max = limits[limit];
  if (max === null || now + adding <= max) return;
  throw new ApiError(
    'entitlement_exceeded',
    `The ${name} plan allows ${max} bytes of ${limit.replace(/_bytes$/, '').replace(/_/g, ' ')}; ${now} are used, and ${adding} more would pass it. Delete some files or change the plan.`,
  );
}
