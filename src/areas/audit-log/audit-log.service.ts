import type { components } from '../../../generated/openapi';
import { planOf } from '../../access/entitlements';
import type { RequestContext } from '../../http/context';
import { notFound, validationError } from '../../http/errors';
import { filteredPageRequest, toFilteredPage, type Page } from '../../http/pagination';
import * as repo from './audit-log.repo';

type AuditEvent = components['schemas']['AuditEvent'];
type Query = {
  limit?: number;
  cursor?: string;
  actor_type?: components['schemas']['AuditActorType'];
  actor_id?: string;
  action?: string;
  target_type?: string;
  target_id?: string;
  since?: string;
  until?: string;
};

const USER_AGENT_MAX = 512;

function display(row: repo.AuditRow): string | null {
  switch (row.actor_type) {
    case 'user':
    case 'mcp_client':
      return row.actor_email ?? null;
    case 'api_token':
      return row.token_name ? `${row.token_name}${row.actor_email ? ` (${row.actor_email})` : ''}` : (row.actor_email ?? null);
    default:
      return null;
  }
}

export function toAuditEvent(row: repo.AuditRow): AuditEvent {
  const system = row.actor_type === 'system' || row.actor_type === 'operator';
  return {
    id: row.id,
    actor: { type: row.actor_type, id: system ? null : row.actor_id, user_id: row.actor_user_id, display: display(row) },
    action: row.action,
    target: row.target_type === null ? null : { type: row.target_type, id: row.target_id },
    changes: (row.changes && typeof row.changes === 'object' && !Array.isArray(row.changes) ? row.changes : {}) as AuditEvent['changes'],
    ip: row.ip,
    user_agent: row.user_agent === null ? null : row.user_agent.slice(0, USER_AGENT_MAX),
    request_id: row.request_id,
    created_at: row.created_at.toISOString(),
  };
}

/** Entries older than the plan's retention are not shown; null: kept for ever. */
async function retainedSince(ctx: RequestContext): Promise<Date | null> {
  const { plan } = await planOf(ctx.db, ctx.orgId);
  return plan.auditLogRetentionDays === null ? null : new Date(Date.now() - plan.auditLogRetentionDays * 86_400_000);
}

export async function list(ctx: RequestContext, query: Query): Promise<Page<AuditEvent>> {
  const since = query.since === undefined ? undefined : new Date(query.since);
  const until = query.until === undefined ? undefined : new Date(query.until);
  if (since && until && since.getTime() >= until.getTime()) {
    throw validationError([{ in: 'query', pointer: '/since', message: 'must be before until' }]);
  }
  const filter: repo.AuditFilter = {
    actor_type: query.actor_type,
    actor_id: query.actor_id,
    action: query.action,
    target_type: query.target_type,
    target_id: query.target_id,
    since,
    until,
  };
  const page = filteredPageRequest(query, 'auditEvent', { ...filter, since: since?.toISOString(), until: until?.toISOString() });
  const rows = await repo.listEntries(ctx.db, ctx.orgId, await retainedSince(ctx), page, filter);
  return toFilteredPage(rows, page, toAuditEvent);
}

export async function get(ctx: RequestContext, id: string): Promise<AuditEvent> {
  const row = await repo.findEntry(ctx.db, ctx.orgId, await retainedSince(ctx), id);
  if (!row) throw notFound('audit entry', id);
  return toAuditEvent(row);
}
