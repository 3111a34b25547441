import type { components } from '../../../generated/openapi';
import type { Executor } from '../../db/database';
import type { RequestContext } from '../../http/context';
import { ApiError, notFound, validationError } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { compileGlob } from '../../access/policy/glob';
import { policySubjectOf } from '../../access/policy';
import { findRestriction, type RestrictionRow } from '../restrictions';
import * as repo from './access-requests.repo';

type AccessRequest = components['schemas']['AccessRequest'];
type Create = components['schemas']['AccessRequestCreate'];
type Resolve = components['schemas']['AccessRequestResolve'];

const WHAT = 'access request';

export function toAccessRequest(row: repo.AccessRequestRow): AccessRequest {
  return {
    id: row.id,
    requester_user_id: row.requester_user_id,
    restriction_id: row.restriction_id,
    connector_slug: row.connector_slug,
    tool_name: row.tool_name,
    synthetic_tool_id: row.synthetic_tool_id,
    reason: row.reason,
    status: row.status,
    resolved_by_user_id: row.resolved_by_user_id,
    resolution_note: row.resolution_note,
    resolved_at: row.resolved_at?.toISOString() ?? null,
    exception_expires_at: row.exception_expires_at?.toISOString() ?? null,
    exception_connector_slug: row.exception_connector_slug,
    exception_tool_pattern: row.exception_tool_pattern,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Holders of access_request:view or :resolve read the whole queue; everyone else their own requests. */
const readsAll = (ctx: RequestContext) => (ctx.org?.permissions.has('access_request:view') || ctx.org?.permissions.has('access_request:resolve')) ?? false;

export async function list(ctx: RequestContext, page: PageRequest, filter: repo.ListFilter): Promise<Page<AccessRequest>> {
  const all = readsAll(ctx);
  if (filter.requester_user_id !== undefined && filter.requester_user_id !== ctx.user && !all) {
    throw new ApiError('missing_permission', "Listing another member's access requests needs access_request:view or access_request:resolve.");
  }
  const unknown = [];
  if (filter.requester_user_id !== undefined && filter.requester_user_id !== ctx.user) {
    const member = await ctx.db
      .selectFrom('memberships')
      .select('user_id')
      .where('org_id', '=', ctx.orgId)
      .where('user_id', '=', filter.requester_user_id)
      .executeTakeFirst();
    if (!member) unknown.push({ in: 'query' as const, pointer: '/requester_user_id', message: 'names no member of this organization' });
  }
  if (filter.restriction_id !== undefined && !(await repo.restrictionNamed(ctx.db, ctx.orgId, filter.restriction_id))) {
    unknown.push({ in: 'query' as const, pointer: '/restriction_id', message: 'names no restriction of this organization' });
  }
  if (unknown.length > 0) throw new ApiError('unknown_reference', 'A filter names something that does not exist in this organization.', { errors: unknown });
  const rows = await repo.listAccessRequests(ctx.db, ctx.orgId, page, all ? filter : { ...filter, requester_user_id: ctx.user });
  return toPage(rows, page, toAccessRequest);
}

/** The request, when the caller may read it (their own, or any with view/resolve); 404 otherwise. */
async function readable(ctx: RequestContext, id: string): Promise<repo.AccessRequestRow> {
  const row = await repo.findAccessRequest(ctx.db, ctx.orgId, id);
  if (!row || (row.requester_user_id !== ctx.user && !readsAll(ctx))) throw notFound(WHAT, id);
  return row;
}

export async function get(ctx: RequestContext, id: string): Promise<AccessRequest> {
  return toAccessRequest(await readable(ctx, id));
}

/** Whether a restriction applies to the member (by user, role or team, or everyone). */
async function appliesTo(db: Executor, orgId: string, r: RestrictionRow, userId: string): Promise<boolean> {
  if (r.applies_to_everyone || r.applies_to_user_ids.includes(userId)) return true;
  const subject = await policySubjectOf(db, orgId, userId);
  return subject.roleIds.some((id) => r.applies_to_role_ids.includes(id)) || subject.teamIds.some((id) => r.applies_to_team_ids.includes(id));
}

/** What the request covers: checked against what the restriction matches (400 validation_failed otherwise). */
function scopeOf(r: RestrictionRow, body: Create): { connector_slug: string | null; tool_name: string | null; synthetic_tool_id: string | null } {
  if (r.match_synthetic_tool_id !== null) {
    const problems = [];
    if (body.connector_slug !== undefined)
      problems.push({ in: 'body' as const, pointer: '/connector_slug', message: 'must be left out: the restriction covers one synthetic tool' });
    if (body.tool_name !== undefined)
      problems.push({ in: 'body' as const, pointer: '/tool_name', message: 'must be left out: the restriction covers one synthetic tool' });
    if (problems.length > 0) throw validationError(problems);
    return { connector_slug: null, tool_name: null, synthetic_tool_id: r.match_synthetic_tool_id };
  }
  const problems = [];
  if (body.connector_slug !== undefined && r.match_connector_slug !== null && body.connector_slug !== r.match_connector_slug) {
    problems.push({ in: 'body' as const, pointer: '/connector_slug', message: `is not the restriction's connector (${r.match_connector_slug})` });
  }
  if (body.tool_name !== undefined && r.match_tool_pattern !== null && !compileGlob(r.match_tool_pattern)(body.tool_name)) {
    problems.push({ in: 'body' as const, pointer: '/tool_name', message: `does not match the restriction's tool pattern ${r.match_tool_pattern}` });
  }
  if (problems.length > 0) throw validationError(problems);
  return { connector_slug: body.connector_slug ?? r.match_connector_slug, tool_name: body.tool_name ?? null, synthetic_tool_id: null };
}

export async function create(ctx: RequestContext, body: Create): Promise<AccessRequest> {
  const userId = ctx.user;
  const found = await findRestriction(ctx.db, ctx.orgId, body.restriction_id);
  if (!found) {
    throw new ApiError('unknown_reference', `No restriction ${body.restriction_id} in this organization.`, {
      errors: [{ in: 'body', pointer: '/restriction_id', message: 'names no restriction of this organization' }],
    });
  }
  scopeOf(found, body);
  const row = await ctx.write(async (w) => {
    // Locked, so that concurrent requests for the same scope file once; judged as it is now.
    const r = await findRestriction(w.db, ctx.orgId, body.restriction_id, true);
    if (!r) throw new ApiError('unknown_reference', `No restriction ${body.restriction_id} in this organization.`);
    const scope = scopeOf(r, body);
    const applies = await appliesTo(w.db, ctx.orgId, r, userId);
    if (!r.is_active || r.effect !== 'require_approval' || !applies) {
      const why = !r.is_active
        ? 'it is inactive'
        : r.effect === 'deny'
          ? 'it denies; only an administrator changing it lifts a deny'
          : 'it does not apply to you';
      throw new ApiError('restriction_not_requestable', `Restriction ${r.id} takes no access requests from you: ${why}.`);
    }
    if (
      await repo.openRequestFor(w.db, ctx.orgId, userId, { restriction_id: r.id, connector_slug: scope.connector_slug, tool_name: scope.tool_name }, new Date())
    ) {
      throw new ApiError(
        'access_request_exists',
        'You already have a pending request, or an approval that has not expired, for this restriction, connector and tool.',
      );
    }
    const inserted = await repo.insertAccessRequest(w.db, {
      id: newId('accessRequest'),
      org_id: ctx.orgId,
      requester_user_id: userId,
      restriction_id: r.id,
      ...scope,
      reason: body.reason,
      status: 'pending',
    });
    w.audit({ targetId: inserted.id, changes: { restriction_id: r.id, ...scope, reason: body.reason } });
    w.emit('access_request.created', { access_request: repo.toEventAccessRequest(inserted) });
    return inserted;
  });
  return toAccessRequest(row);
}

/**
 * What an approved exception covers, fixed at approval: the connector and tools the request
 * named, else those the restriction matches now. A restriction broadened later does not
 * widen it. A tool name has no glob characters, so it is the pattern of exactly itself.
 */
function coveredBy(request: repo.AccessRequestRow, r: RestrictionRow): { exception_connector_slug: string | null; exception_tool_pattern: string | null } {
  if (request.synthetic_tool_id !== null || r.match_synthetic_tool_id !== null) return { exception_connector_slug: null, exception_tool_pattern: null };
  return {
    exception_connector_slug: request.connector_slug ?? r.match_connector_slug,
    exception_tool_pattern: request.tool_name ?? r.match_tool_pattern ?? '*',
  };
}

export async function resolve(ctx: RequestContext, id: string, body: Resolve): Promise<AccessRequest> {
  const now = new Date();
  // Another organization's id, or none: 404 before anything else is judged.
  const found = await repo.findAccessRequest(ctx.db, ctx.orgId, id);
  if (!found) throw notFound(WHAT, id);
  let expiresAt: Date | null = null;
  if (body.decision === 'approved') {
    // Approving grants access: a person in the web app only (denying is open to tokens too).
    if (ctx.authenticated.kind !== 'session') {
      throw new ApiError('requires_person', 'Approving an access request is reserved for a person signed in to the web app; an API token may only deny.');
    }
    if (body.expires_at != null) {
      expiresAt = new Date(body.expires_at);
      if (expiresAt.getTime() <= now.getTime()) throw validationError([{ in: 'body', pointer: '/expires_at', message: 'must be in the future' }]);
    }
  }
  if (found.requester_user_id === ctx.user)
    throw new ApiError('cannot_resolve_own_request', 'Nobody resolves their own access request; someone else holding access_request:resolve must.');
  const row = await ctx.write(async (w) => {
    const current = await repo.findAccessRequest(w.db, ctx.orgId, id, true);
    if (!current) throw notFound(WHAT, id);
    if (current.status !== 'pending')
      throw new ApiError('invalid_transition', `Access request ${id} is ${current.status}; only a pending request can be resolved.`);
    // Locked, so that an edit of the restriction cannot slip between reading its match and the approval.
    const restriction = body.decision === 'approved' ? await findRestriction(w.db, ctx.orgId, current.restriction_id, true) : undefined;
    const updated = await repo.transition(w.db, ctx.orgId, id, {
      status: body.decision,
      resolved_by_user_id: ctx.user,
      resolution_note: body.note ?? null,
      resolved_at: now,
      exception_expires_at: expiresAt,
      ...(restriction ? coveredBy(current, restriction) : {}),
    });
    if (!updated) throw new ApiError('invalid_transition', `Access request ${id} is no longer pending.`);
    w.audit({
      targetId: id,
      changes: {
        decision: body.decision,
        note: body.note ?? null,
        expires_at: expiresAt?.toISOString() ?? null,
        ...(body.decision === 'approved' ? { covers: { connector_slug: updated.exception_connector_slug, tool_pattern: updated.exception_tool_pattern } } : {}),
      },
    });
    w.emit('access_request.resolved', { access_request: repo.toEventAccessRequest(updated), resolved_by_user_id: ctx.user });
    return updated;
  });
  await tellRequester(ctx, row);
  return toAccessRequest(row);
}

/** The requester hears of the decision by email; a failure to send is logged, the decision stands. */
async function tellRequester(ctx: RequestContext, row: repo.AccessRequestRow): Promise<void> {
  try {
    const user = await ctx.db.selectFrom('users').select(['email']).where('id', '=', row.requester_user_id).executeTakeFirst();
    if (!user) return;
    const what =
      row.synthetic_tool_id ?? ([row.connector_slug, row.tool_name].filter(Boolean).join(' / ') || `everything restriction ${row.restriction_id} holds back`);
    const lines = [
      `Your access request ${row.id} (${what}) was ${row.status}.`,
      row.status === 'approved'
        ? row.exception_expires_at
          ? `The exception lasts until ${row.exception_expires_at.toISOString()}.`
          : 'The exception lasts as long as the restriction exists.'
        : null,
      row.resolution_note ? `Note: ${row.resolution_note}` : null,
    ].filter((l): l is string => l !== null);
    await ctx.deps.mailer.send({ to: [user.email], subject: `Access request ${row.status}`, text: lines.join('\n') });
  } catch (err) {
    ctx.log.warn({ err, access_request_id: row.id }, 'could not email the requester about the decision');
  }
}

export async function withdraw(ctx: RequestContext, id: string): Promise<AccessRequest> {
  const row = await ctx.write(async (w) => {
    const current = await repo.findAccessRequest(w.db, ctx.orgId, id, true);
    if (!current || (current.requester_user_id !== ctx.user && !readsAll(ctx))) throw notFound(WHAT, id);
    if (current.requester_user_id !== ctx.user) throw new ApiError('insufficient_access', 'Only the member who filed an access request may withdraw it.');
    if (current.status !== 'pending')
      throw new ApiError('invalid_transition', `Access request ${id} is ${current.status}; only a pending request can be withdrawn.`);
    const updated = await repo.transition(w.db, ctx.orgId, id, { status: 'withdrawn', resolved_at: new Date() });
    if (!updated) throw new ApiError('invalid_transition', `Access request ${id} is no longer pending.`);
    w.audit({ targetId: id, changes: { status: 'withdrawn' } });
    return updated;
  });
  return toAccessRequest(row);
}
