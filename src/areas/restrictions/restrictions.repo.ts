import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';

export const COLUMNS = [
  'id',
  'org_id',
  'name',
  'description',
  'match_connector_slug',
  'match_tool_pattern',
  'match_synthetic_tool_id',
  'effect',
  'applies_to_everyone',
  'applies_to_role_ids',
  'applies_to_team_ids',
  'applies_to_user_ids',
  'is_active',
  'created_by_user_id',
  'created_at',
  'updated_at',
] as const;

export type RestrictionRow = Pick<Row<'restrictions'>, (typeof COLUMNS)[number]>;

export interface ListFilter {
  effect?: 'deny' | 'require_approval';
  connector_slug?: string;
  synthetic_tool_id?: string;
  is_active?: boolean;
}

export function listRestrictions(db: Executor, orgId: string, page: PageRequest, filter: ListFilter): Promise<RestrictionRow[]> {
  return db
    .selectFrom('restrictions')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(filter.effect !== undefined, (q) => q.where('effect', '=', filter.effect as 'deny'))
    .$if(filter.connector_slug !== undefined, (q) => q.where('match_connector_slug', '=', filter.connector_slug as string))
    .$if(filter.synthetic_tool_id !== undefined, (q) => q.where('match_synthetic_tool_id', '=', filter.synthetic_tool_id as string))
    .$if(filter.is_active !== undefined, (q) => q.where('is_active', '=', filter.is_active as boolean))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findRestriction(db: Executor, orgId: string, id: string, forUpdate = false): Promise<RestrictionRow | undefined> {
  return db
    .selectFrom('restrictions')
    .select(COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

export function insertRestriction(db: Executor, values: NewRow<'restrictions'>): Promise<RestrictionRow> {
  return db.insertInto('restrictions').values(values).returning(COLUMNS).executeTakeFirstOrThrow();
}

export function updateRestriction(db: Executor, orgId: string, id: string, changes: RowChanges<'restrictions'>): Promise<RestrictionRow | undefined> {
  return db.updateTable('restrictions').set(changes).where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

export function deleteRestriction(db: Executor, orgId: string, id: string): Promise<RestrictionRow | undefined> {
  return db.deleteFrom('restrictions').where('org_id', '=', orgId).where('id', '=', id).returning(COLUMNS).executeTakeFirst();
}

export async function syntheticToolExists(db: Executor, orgId: string, id: string): Promise<boolean> {
  return !!(await db.selectFrom('synthetic_tools').select('id').where('org_id', '=', orgId).where('id', '=', id).executeTakeFirst());
}

/** Of the given ids, those that name a role, a team or an active member of the organization now. */
export async function livePrincipals(
  db: Executor,
  orgId: string,
  ids: { roleIds: readonly string[]; teamIds: readonly string[]; userIds: readonly string[] },
): Promise<{ roleIds: Set<string>; teamIds: Set<string>; userIds: Set<string> }> {
  const [roles, teams, users] = await Promise.all([
    ids.roleIds.length === 0
      ? []
      : db
          .selectFrom('roles')
          .select('id')
          .where('org_id', '=', orgId)
          .where('id', 'in', [...ids.roleIds])
          .execute(),
    ids.teamIds.length === 0
      ? []
      : db
          .selectFrom('teams')
          .select('id')
          .where('org_id', '=', orgId)
          .where('id', 'in', [...ids.teamIds])
          .execute(),
    ids.userIds.length === 0
      ? []
      : db
          .selectFrom('memberships')
          .select('user_id as id')
          .where('org_id', '=', orgId)
          .where('status', '=', 'active')
          .where('user_id', 'in', [...ids.userIds])
          .execute(),
  ]);
  return { roleIds: new Set(roles.map((r) => r.id)), teamIds: new Set(teams.map((r) => r.id)), userIds: new Set(users.map((r) => r.id)) };
}

/**
 * The restrictions that name a synthetic tool, a role or a team (ids, oldest first): deleting
 * a synthetic tool, role or team that a restriction names is refused (409), per the spec of
 * deleteSyntheticTool, deleteRole and deleteTeam.
 */
export async function restrictionsNaming(
  db: Executor,
  orgId: string,
  what: { syntheticToolId: string } | { roleId: string } | { teamId: string },
): Promise<string[]> {
  const rows = await db
    .selectFrom('restrictions')
    .select('id')
    .where('org_id', '=', orgId)
    .where((eb) =>
      'syntheticToolId' in what
        ? eb('match_synthetic_tool_id', '=', what.syntheticToolId)
        : 'roleId' in what
          ? eb(sql<boolean>`applies_to_role_ids @> array[${what.roleId}]::text[]`, '=', true)
          : eb(sql<boolean>`applies_to_team_ids @> array[${what.teamId}]::text[]`, '=', true),
    )
    .orderBy('id')
    .execute();
  return rows.map((r) => r.id);
}
