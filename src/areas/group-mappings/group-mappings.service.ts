import { sql } from 'kysely';
import type { components } from '../../../generated/openapi';
import { requireFeature } from '../../access/entitlements';
import type { Executor } from '../../db/database';
import type { RequestContext } from '../../http/context';
import { ApiError, isUniqueViolation, notFound, validationError, type ValidationProblem } from '../../http/errors';
import type { Usage } from '../../http/hooks';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { holdsOwner } from '../members';
import { permissionsOf, requireHeld, rolesIn } from '../roles';
import { reconcileMappedGrants } from './grants';

type GroupMapping = components['schemas']['GroupMapping'];
// The generated type of GroupMappingCreate is `unknown` (its anyOf): this is what the schema admits.
export type Create = { scim_group_id: string; role_id?: string; team_id?: string };
type Update = components['schemas']['GroupMappingUpdate'];

const UNIQUE = 'group_mappings_grant_key';
const COLUMNS = ['id', 'scim_group_id', 'role_id', 'team_id', 'created_by_user_id', 'created_at', 'updated_at'] as const;

function mappings(db: Executor, orgId: string) {
  return db.selectFrom('group_mappings').select(COLUMNS).where('org_id', '=', orgId);
}
type Row = Awaited<ReturnType<ReturnType<typeof mappings>['executeTakeFirstOrThrow']>>;

const toMapping = (row: Row): GroupMapping => ({
  id: row.id,
  scim_group_id: row.scim_group_id,
  role_id: row.role_id,
  team_id: row.team_id,
  created_by_user_id: row.created_by_user_id,
  created_at: row.created_at.toISOString(),
  updated_at: row.updated_at.toISOString(),
});

const unknown = (problems: ValidationProblem[]) => new ApiError('unknown_reference', 'A reference names nothing in this organization.', { errors: problems });

/** Each named group, role and team must be this organization's. */
async function checkReferences(
  db: Executor,
  orgId: string,
  where: 'query' | 'body',
  refs: { scim_group_id?: string | null; role_id?: string | null; team_id?: string | null },
) {
  const problems: ValidationProblem[] = [];
  if (
    refs.scim_group_id &&
    !(await db.selectFrom('scim_groups').select('id').where('org_id', '=', orgId).where('id', '=', refs.scim_group_id).executeTakeFirst())
  ) {
    problems.push({ in: where, pointer: '/scim_group_id', message: 'names no SCIM group of this organization' });
  }
  const role = refs.role_id ? (await rolesIn(db, orgId, [refs.role_id]))[0] : undefined;
  if (refs.role_id && !role) problems.push({ in: where, pointer: '/role_id', message: 'names no role of this organization' });
  if (refs.team_id && !(await db.selectFrom('teams').select('id').where('org_id', '=', orgId).where('id', '=', refs.team_id).executeTakeFirst())) {
    problems.push({ in: where, pointer: '/team_id', message: 'names no team of this organization' });
  }
  if (problems.length > 0) throw unknown(problems);
  return role;
}

/** Granting through a mapping is granting: bounded by what the caller holds; the Owner role only by an Owner. */
async function requireMayGrant(ctx: RequestContext, role: Awaited<ReturnType<typeof checkReferences>>): Promise<void> {
  if (!role) return;
  if (role.system_key === 'owner' && !(await holdsOwner(ctx.db, ctx.orgId, ctx.user))) {
    throw new ApiError('permission_escalation', 'Only an Owner may map a group to the Owner role.');
  }
  requireHeld(ctx, permissionsOf(role), 'grant a role through a group mapping');
}

const conflict = (err: unknown): never => {
  if (isUniqueViolation(err, UNIQUE)) throw new ApiError('conflict', 'This group is already mapped to the same role and team.');
  throw err;
};

async function groupMembers(db: Executor, groupId: string): Promise<string[]> {
  return (await db.selectFrom('scim_group_members').select('user_id').where('group_id', '=', groupId).execute()).map((r) => r.user_id);
}

export async function list(
  ctx: RequestContext,
  page: PageRequest,
  query: { scim_group_id?: string; role_id?: string; team_id?: string },
): Promise<Page<GroupMapping>> {
  await checkReferences(ctx.db, ctx.orgId, 'query', query);
  const rows = await mappings(ctx.db, ctx.orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(query.scim_group_id !== undefined, (q) => q.where('scim_group_id', '=', query.scim_group_id as string))
    .$if(query.role_id !== undefined, (q) => q.where('role_id', '=', query.role_id as string))
    .$if(query.team_id !== undefined, (q) => q.where('team_id', '=', query.team_id as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
  return toPage(rows, page, toMapping);
}

export async function get(ctx: RequestContext, id: string): Promise<GroupMapping> {
  const row = await mappings(ctx.db, ctx.orgId).where('id', '=', id).executeTakeFirst();
  if (!row) throw notFound('group mapping', id);
  return toMapping(row);
}

export async function create(ctx: RequestContext, body: Create, id: string): Promise<GroupMapping> {
  await requireFeature(ctx.db, ctx.orgId, 'scim');
  const role = await checkReferences(ctx.db, ctx.orgId, 'body', body);
  await requireMayGrant(ctx, role);
  await ctx.write(async (w) => {
    await w.db
      .insertInto('group_mappings')
      .values({
        id,
        org_id: ctx.orgId,
        scim_group_id: body.scim_group_id,
        role_id: body.role_id ?? null,
        team_id: body.team_id ?? null,
        created_by_user_id: ctx.user,
      })
      .execute()
      .catch(conflict);
    await reconcileMappedGrants(w, ctx.deps.hooks, ctx.orgId, await groupMembers(w.db, body.scim_group_id));
    w.audit({ targetId: id, changes: { scim_group_id: body.scim_group_id, role_id: body.role_id ?? null, team_id: body.team_id ?? null } });
  });
  return get(ctx, id);
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<GroupMapping> {
  const current = await mappings(ctx.db, ctx.orgId).where('id', '=', id).executeTakeFirst();
  if (!current) throw notFound('group mapping', id);
  if (body.scim_group_id !== undefined && body.scim_group_id !== current.scim_group_id) {
    throw new ApiError('immutable_field', 'scim_group_id cannot change; delete the mapping and create another.', {
      errors: [{ in: 'body', pointer: '/scim_group_id', message: 'cannot change' }],
    });
  }
  const next = {
    role_id: body.role_id === undefined ? current.role_id : body.role_id,
    team_id: body.team_id === undefined ? current.team_id : body.team_id,
  };
  if (next.role_id === null && next.team_id === null) {
    throw validationError([{ in: 'body', pointer: '', message: 'a mapping needs a role_id or a team_id; delete it instead' }]);
  }
  const role = await checkReferences(ctx.db, ctx.orgId, 'body', next);
  if (next.role_id !== current.role_id) await requireMayGrant(ctx, role);
  await ctx.write(async (w) => {
    await w.db.updateTable('group_mappings').set(next).where('id', '=', id).where('org_id', '=', ctx.orgId).execute().catch(conflict);
    await reconcileMappedGrants(w, ctx.deps.hooks, ctx.orgId, await groupMembers(w.db, current.scim_group_id));
    const changes: Record<string, unknown> = {};
    if (next.role_id !== current.role_id) changes.role_id = { from: current.role_id, to: next.role_id };
    if (next.team_id !== current.team_id) changes.team_id = { from: current.team_id, to: next.team_id };
    w.audit({ targetId: id, changes });
  });
  return get(ctx, id);
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await mappings(w.db, ctx.orgId).where('id', '=', id).forUpdate().executeTakeFirst();
    if (!row) throw notFound('group mapping', id);
    await w.db.deleteFrom('group_mappings').where('id', '=', id).execute();
    await reconcileMappedGrants(w, ctx.deps.hooks, ctx.orgId, await groupMembers(w.db, row.scim_group_id));
    w.audit({ targetId: id, changes: { scim_group_id: row.scim_group_id, role_id: row.role_id, team_id: row.team_id } });
  });
}

/** Mappings name roles and teams: deleting one of them is refused while a mapping does (the roleUsage and teamUsage hooks). */
export async function roleUsage(db: Executor, orgId: string, roleId: string): Promise<Usage> {
  const row = await db
    .selectFrom('group_mappings')
    .select(sql<string>`count(*)`.as('n'))
    .where('org_id', '=', orgId)
    .where('role_id', '=', roleId)
    .executeTakeFirstOrThrow();
  return { count: Number(row.n), what: 'group mappings' };
}

export async function teamUsage(db: Executor, orgId: string, teamId: string): Promise<Usage> {
  const row = await db
    .selectFrom('group_mappings')
    .select(sql<string>`count(*)`.as('n'))
    .where('org_id', '=', orgId)
    .where('team_id', '=', teamId)
    .executeTakeFirstOrThrow();
  return { count: Number(row.n), what: 'group mappings' };
}
