import type { components } from '../../../generated/openapi';
import { limitsOf, type LimitKey } from '../../access/entitlements';
import type { Executor } from '../../db/database';
import { defineArea } from '../../http/area';
import { seatsInUse } from '../../access/seats';
import { fileStorageUsed } from '../files';

type Entitlements = components['schemas']['Entitlements'];

const count = async (query: Promise<{ count: number } | undefined>) => (await query)?.count ?? 0;

/** What counts against each limit now, for one organization. */
async function usage(db: Executor, orgId: string): Promise<Record<LimitKey, number>> {
  const rows = (table: 'connections' | 'mcp_servers' | 'connectors' | 'toolboxes' | 'synthetic_tools') =>
    count(
      db
        .selectFrom(table)
        .select((eb) => eb.fn.countAll<number>().as('count'))
        .where('org_id', '=', orgId)
        .executeTakeFirst()
        .then((r) => r && { count: Number(r.count) }),
    );
  const [seats, connections, mcpServers, customConnectors, toolboxes, syntheticTools, fileBytes] = await Promise.all([
    seatsInUse(db, orgId),
    rows('connections'),
    rows('mcp_servers'),
    rows('connectors'),
    rows('toolboxes'),
    rows('synthetic_tools'),
    fileStorageUsed(db, orgId),
  ]);
  return {
    seats,
    connections,
    mcp_servers: mcpServers,
    custom_connectors: customConnectors,
    toolboxes,
    synthetic_tools: syntheticTools,
    // Staged files of open upload requests count too (a reservation by its declared size).
    file_storage_bytes: fileBytes,
  };
}

export default defineArea({
  tag: 'Entitlements',
  handlers: {
    async getEntitlements(_input, ctx) {
      const [{ name, plan, limits: inForce }, used] = await Promise.all([limitsOf(ctx.db, ctx.orgId), usage(ctx.db, ctx.orgId)]);
      const limits = Object.fromEntries(
        (Object.keys(inForce) as LimitKey[]).map((key) => [key, { limit: inForce[key], used: used[key] }]),
      ) as Entitlements['limits'];
      const body: Entitlements = {
        organization_id: ctx.orgId,
        plan: name,
        features: { ...plan.features },
        limits,
        audit_log_retention_days: plan.auditLogRetentionDays,
        computed_at: new Date().toISOString(),
      };
      return { status: 200, body };
    },
  },
});
