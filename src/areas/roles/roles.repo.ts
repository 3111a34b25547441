import type { Executor } from '../../db/database';
import type { NewRow, Row, RowChanges, SystemRoleKey } from '../../db/schema';
import type { PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';

/** A custom role: its permissions are stored (a system role's come from the catalog). */
export async function insertCustomRole(
  db: Executor,
  input: {
    orgId: string;
    name: string;
    description?: string | null;
    permissions: readonly string[];
    seatClass?: 'billable' | 'free_admin';
    createdByUserId?: string | null;
  },
): Promise<string> {
  const id = newId('role');
  await db
    .insertInto('roles')
    .values({
      id,
      org_id: input.orgId,
      name: input.name,
      description: input.description ?? null,
      permissions: [...new Set(input.permissions)].sort(),
      is_system: false,
      system_key: null,
      seat_class: input.seatClass ?? 'billable',
      created_by_user_id: input.createdByUserId ?? null,
    })
    .execute();
  return id;
}

export async function systemRoleId(db: Executor, orgId: string, key: SystemRoleKey): Promise<string> {
  return (await db.selectFrom('roles').select('id').where('org_id', '=', orgId).where('system_key', '=', key).executeTakeFirstOrThrow()).id;
}

// ---------------------------------------------------------------------------------------
// The Roles operations
// ---------------------------------------------------------------------------------------

export const ROLE_COLUMNS = [
  'id',
  'org_id',
  'name',
  'description',
  'permissions',
  'is_system',
  'system_key',
  'seat_class',
  'created_by_user_id',
  'created_at',
  'updated_at',
] as const;
export type RoleRow = Pick<Row<'roles'>, (typeof ROLE_COLUMNS)[number]>;
export type RoleWithCount = RoleRow & { member_count: number };

/** Unique per organization without regard to case (migration 2026_11_26_060002). */
export const ROLE_NAME_CONSTRAINT = 'roles_org_id_lower_name_key';

/** How many members (active or suspended: removed ones hold no roles) hold each role. */
export async function memberCounts(db: Executor, orgId: string, roleIds: readonly string[]): Promise<Map<string, number>> {
  const counts = new Map<string, number>(roleIds.map((id) => [id, 0]));
  if (roleIds.length === 0) return counts;
  const rows = await db
    .selectFrom('role_assignments')
    .select(['role_id', (eb) => eb.fn.countAll<string>().as('n')])
    .where('org_id', '=', orgId)
    .where('role_id', 'in', [...roleIds])
    .groupBy('role_id')
    .execute();
  for (const row of rows) counts.set(row.role_id, Number(row.n));
  return counts;
}

export function listRoles(db: Executor, orgId: string, page: PageRequest, filter: { isSystem?: boolean }): Promise<RoleRow[]> {
  return db
    .selectFrom('roles')
    .select(ROLE_COLUMNS)
    .where('org_id', '=', orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .$if(filter.isSystem !== undefined, (q) => q.where('is_system', '=', filter.isSystem as boolean))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
}

export function findRole(db: Executor, orgId: string, id: string, forUpdate = false): Promise<RoleRow | undefined> {
  return db
    .selectFrom('roles')
    .select(ROLE_COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .$if(forUpdate, (q) => q.forUpdate())
    .executeTakeFirst();
}

/** The organization's roles among `ids`. */
export function rolesIn(db: Executor, orgId: string, ids: readonly string[]): Promise<RoleRow[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('roles')
    .select(ROLE_COLUMNS)
    .where('org_id', '=', orgId)
    .where('id', 'in', [...ids])
    .orderBy('id')
    .execute();
}

export function insertRole(db: Executor, values: NewRow<'roles'>): Promise<RoleRow> {
  return db.insertInto('roles').values(values).returning(ROLE_COLUMNS).executeTakeFirstOrThrow();
}

export function updateRole(db: Executor, orgId: string, id: string, changes: RowChanges<'roles'>): Promise<RoleRow | undefined> {
  return db
    .updateTable('roles')
    .set(changes)
    .where('org_id', '=', orgId)
    .where('id', '=', id)
    .where('is_system', '=', false)
    .returning(ROLE_COLUMNS)
    .executeTakeFirst();
}

export function deleteRole(db: Executor, orgId: string, id: string): Promise<RoleRow | undefined> {
  return db.deleteFrom('roles').where('org_id', '=', orgId).where('id', '=', id).where('is_system', '=', false).returning(ROLE_COLUMNS).executeTakeFirst();
}
