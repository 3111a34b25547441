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

/**
 * 403 `entitlement_exceeded` unless one more fits: `used` is how many there are now, before
 * the one being added (it may exceed the limit after a downgrade; then nothing new fits).
 */
export async function requireWithinLimit(db: Executor, orgId: string, limit: LimitKey, used: number): Promise<void> {
  const { name, plan } = await planOf(db, orgId);
  const max = plan.limits[limit];
  if (max !== null && used >= max) {
    throw new ApiError('entitlement_exceeded', `The ${name} plan allows ${max} ${limit.replace(/_/g, ' ')}; ${used} exist. Delete some or change the plan.`);
  }
}
