import type { components } from '../../../generated/openapi';
import { requireFeature } from '../../access/entitlements';
import type { Executor } from '../../db/database';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError, type ValidationProblem } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { closePendingOfRestriction, toEventAccessRequest } from '../access-requests';
import { lookup, visibleTo } from '../connectors';
import * as repo from './restrictions.repo';

type Restriction = components['schemas']['Restriction'];
type Create = components['schemas']['RestrictionCreate'];
type Update = components['schemas']['RestrictionUpdate'];
type MatchInput = components['schemas']['RestrictionMatchInput'];
type AppliesToInput = components['schemas']['RestrictionAppliesToInput'];

const WHAT = 'restriction';
const NAME_CONSTRAINT = 'restrictions_org_id_name_key';

type Live = Awaited<ReturnType<typeof repo.livePrincipals>>;

/** The restriction as the spec shows it; roles, teams and users that are gone (or left) drop out of `applies_to`. */
function toRestriction(row: repo.RestrictionRow, live: Live): Restriction {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    match: { connector_slug: row.match_connector_slug, tool_pattern: row.match_tool_pattern, synthetic_tool_id: row.match_synthetic_tool_id },
    effect: row.effect,
    applies_to: {
      everyone: row.applies_to_everyone,
      role_ids: row.applies_to_role_ids.filter((id) => live.roleIds.has(id)),
      team_ids: row.applies_to_team_ids.filter((id) => live.teamIds.has(id)),
      user_ids: row.applies_to_user_ids.filter((id) => live.userIds.has(id)),
    },
    is_active: row.is_active,
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

async function present(ctx: RequestContext, rows: repo.RestrictionRow[], db: Executor = ctx.db): Promise<(row: repo.RestrictionRow) => Restriction> {
  const live = await repo.livePrincipals(db, ctx.orgId, {
    roleIds: [...new Set(rows.flatMap((r) => r.applies_to_role_ids))],
    teamIds: [...new Set(rows.flatMap((r) => r.applies_to_team_ids))],
    userIds: [...new Set(rows.flatMap((r) => r.applies_to_user_ids))],
  });
  return (row) => toRestriction(row, live);
}

const nameTaken = (name: string) => new ApiError('name_taken', `Another restriction of this organization is named "${name}".`);

const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined ? run() : conflictOnUnique(NAME_CONSTRAINT, () => nameTaken(name), run);

interface StoredMatch {
  match_connector_slug: string | null;
  match_tool_pattern: string | null;
  match_synthetic_tool_id: string | null;
}
interface StoredAppliesTo {
  applies_to_everyone: boolean;
  applies_to_role_ids: string[];
  applies_to_team_ids: string[];
  applies_to_user_ids: string[];
}

/** The shape rules the schema cannot say (400 validation_failed), then the references (400 unknown_reference). */
async function checkInput(
  ctx: RequestContext,
  match: MatchInput | undefined,
  appliesTo: AppliesToInput | undefined,
): Promise<{ match?: StoredMatch; appliesTo?: StoredAppliesTo }> {
  const problems: ValidationProblem[] = [];
  let storedMatch: StoredMatch | undefined;
  let storedApplies: StoredAppliesTo | undefined;
  if (match !== undefined) {
    storedMatch = {
      match_connector_slug: match.connector_slug ?? null,
      match_tool_pattern: match.tool_pattern ?? null,
      match_synthetic_tool_id: match.synthetic_tool_id ?? null,
    };
    if (storedMatch.match_synthetic_tool_id !== null) {
      if (storedMatch.match_connector_slug !== null)
        problems.push({ in: 'body', pointer: '/match/connector_slug', message: 'must be null when synthetic_tool_id is set' });
      if (storedMatch.match_tool_pattern !== null)
        problems.push({ in: 'body', pointer: '/match/tool_pattern', message: 'must be null when synthetic_tool_id is set' });
    }
  }
  if (appliesTo !== undefined) {
    storedApplies = {
      applies_to_everyone: appliesTo.everyone ?? false,
      applies_to_role_ids: [...new Set(appliesTo.role_ids ?? [])],
      applies_to_team_ids: [...new Set(appliesTo.team_ids ?? [])],
      applies_to_user_ids: [...new Set(appliesTo.user_ids ?? [])],
    };
    const ids = storedApplies.applies_to_role_ids.length + storedApplies.applies_to_team_ids.length + storedApplies.applies_to_user_ids.length;
    if (storedApplies.applies_to_everyone && ids > 0)
      problems.push({ in: 'body', pointer: '/applies_to/everyone', message: 'must be false when role, team or user ids are given' });
    if (!storedApplies.applies_to_everyone && ids === 0)
      problems.push({ in: 'body', pointer: '/applies_to', message: 'needs everyone: true or at least one role, team or user id' });
  }
  if (problems.length > 0) throw validationError(problems);

  const unknown: ValidationProblem[] = [];
  if (storedMatch?.match_connector_slug && !(await lookup(ctx.db, ctx.orgId, storedMatch.match_connector_slug))) {
    unknown.push({ in: 'body', pointer: '/match/connector_slug', message: 'names no connector of this organization' });
  }
  if (storedMatch?.match_synthetic_tool_id && !(await repo.syntheticToolExists(ctx.db, ctx.orgId, storedMatch.match_synthetic_tool_id))) {
    unknown.push({ in: 'body', pointer: '/match/synthetic_tool_id', message: 'names no synthetic tool of this organization' });
  }
  if (storedApplies) {
    const live = await repo.livePrincipals(ctx.db, ctx.orgId, {
      roleIds: storedApplies.applies_to_role_ids,
      teamIds: storedApplies.applies_to_team_ids,
      userIds: storedApplies.applies_to_user_ids,
    });
    const check = (list: string[], found: Set<string>, member: string, what: string) =>
      list.forEach((id, i) => {
        if (!found.has(id)) unknown.push({ in: 'body', pointer: `/applies_to/${member}/${i}`, message: `names no ${what} of this organization` });
      });
    check(storedApplies.applies_to_role_ids, live.roleIds, 'role_ids', 'role');
    check(storedApplies.applies_to_team_ids, live.teamIds, 'team_ids', 'team');
    check(storedApplies.applies_to_user_ids, live.userIds, 'user_ids', 'active member');
  }
  if (unknown.length > 0)
    throw new ApiError('unknown_reference', 'The restriction names something that does not exist in this organization.', { errors: unknown });
  return { match: storedMatch, appliesTo: storedApplies };
}

export async function list(ctx: RequestContext, page: PageRequest, filter: repo.ListFilter): Promise<Page<Restriction>> {
  const unknown: ValidationProblem[] = [];
  if (filter.connector_slug !== undefined) {
    const found = await lookup(ctx.db, ctx.orgId, filter.connector_slug);
    const sees =
      found &&
      (found.source === 'built_in' ||
        (await visibleTo(ctx.db, ctx.orgId, ctx.user, ctx.org?.permissions.has('connector:manage') ?? false, filter.connector_slug)));
    if (!sees) unknown.push({ in: 'query', pointer: '/connector_slug', message: 'names no connector you can see' });
  }
  if (filter.synthetic_tool_id !== undefined && !(await repo.syntheticToolExists(ctx.db, ctx.orgId, filter.synthetic_tool_id))) {
    unknown.push({ in: 'query', pointer: '/synthetic_tool_id', message: 'names no synthetic tool of this organization' });
  }
  if (unknown.length > 0) throw new ApiError('unknown_reference', 'A filter names something that does not exist or that you cannot see.', { errors: unknown });
  const rows = await repo.listRestrictions(ctx.db, ctx.orgId, page, filter);
  return toPage(rows, page, await present(ctx, rows));
}

export async function get(ctx: RequestContext, id: string): Promise<Restriction> {
  const row = await repo.findRestriction(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return (await present(ctx, [row]))(row);
}

const summary = (row: repo.RestrictionRow) => ({ id: row.id, name: row.name, effect: row.effect });

export async function create(ctx: RequestContext, body: Create): Promise<Restriction> {
  await requireFeature(ctx.db, ctx.orgId, 'restrictions');
  const { match, appliesTo } = await checkInput(ctx, body.match ?? {}, body.applies_to);
  const id = newId('restriction');
  const row = await guardName(body.name, () =>
    ctx.write(async (w) => {
      const inserted = await repo.insertRestriction(w.db, {
        id,
        org_id: ctx.orgId,
        name: body.name,
        description: body.description ?? null,
        ...(match as StoredMatch),
        effect: body.effect,
        ...(appliesTo as StoredAppliesTo),
        is_active: body.is_active ?? true,
        created_by_user_id: ctx.user,
      });
      w.audit({
        targetId: id,
        changes: {
          name: inserted.name,
          description: inserted.description,
          match: body.match ?? {},
          effect: inserted.effect,
          applies_to: body.applies_to,
          is_active: inserted.is_active,
        },
      });
      w.emit('restriction.updated', { restriction: summary(inserted), change: 'created' });
      return inserted;
    }),
  );
  return (await present(ctx, [row]))(row);
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<Restriction> {
  if (!(await repo.findRestriction(ctx.db, ctx.orgId, id))) throw notFound(WHAT, id);
  const { match, appliesTo } = await checkInput(ctx, body.match, body.applies_to);
  const row = await guardName(body.name, () =>
    ctx.write(async (w) => {
      const current = await repo.findRestriction(w.db, ctx.orgId, id, true);
      if (!current) throw notFound(WHAT, id);
      const changes: Parameters<typeof repo.updateRestriction>[3] = { ...match, ...appliesTo };
      if (body.name !== undefined) changes.name = body.name;
      if (body.description !== undefined) changes.description = body.description;
      if (body.effect !== undefined) changes.effect = body.effect;
      if (body.is_active !== undefined) changes.is_active = body.is_active;
      const updated = await repo.updateRestriction(w.db, ctx.orgId, id, changes);
      if (!updated) throw notFound(WHAT, id);
      // Before and after as the API shows them (match and applies_to included), the members sent.
      const show = await present(ctx, [current, updated], w.db);
      const sent = (r: repo.RestrictionRow) => {
        const shown = show(r) as unknown as Record<string, unknown>;
        return Object.fromEntries(Object.keys(body).map((key) => [key, shown[key]]));
      };
      w.audit({ targetId: id, changes: changedMembers(sent(current), sent(updated)) });
      w.emit('restriction.updated', { restriction: summary(updated), change: 'updated' });
      return updated;
    }),
  );
  return (await present(ctx, [row]))(row);
}

/** Deletes it and closes its pending access requests as denied by the system, in one transaction. */
export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const deleted = await repo.deleteRestriction(w.db, ctx.orgId, id);
    if (!deleted) throw notFound(WHAT, id);
    const closed = (await closePendingOfRestriction(w.db, ctx.orgId, id, new Date())).sort((x, y) => (x.id < y.id ? -1 : 1));
    w.audit({ targetId: id, changes: { name: deleted.name, effect: deleted.effect, closed_access_request_ids: closed.map((r) => r.id) } });
    w.emit('restriction.updated', { restriction: summary(deleted), change: 'deleted' });
    for (const request of closed) w.emit('access_request.resolved', { access_request: toEventAccessRequest(request), resolved_by_user_id: null });
  });
}
