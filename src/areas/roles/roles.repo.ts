import type { Executor } from '../../db/database';
import type { SystemRoleKey } from '../../db/schema';
import { newId } from '../../lib/ids';

/** A custom role: its permissions are stored (a system role's come from the catalog). */
export async function insertCustomRole(
  db: Executor,
  input: { orgId: string; name: string; description?: string | null; permissions: readonly string[]; seatClass?: 'billable' | 'free_admin'; createdByUserId?: string | null },
): Promise<string> {
  const id = newId('role');
  await db
    .insertInto('roles')
    .values({
      id, org_id: input.orgId, name: input.name, description: input.description ?? null, permissions: [...new Set(input.permissions)].sort(),
      is_system: false, system_key: null, seat_class: input.seatClass ?? 'billable', created_by_user_id: input.createdByUserId ?? null,
    })
    .execute();
  return id;
}

export async function systemRoleId(db: Executor, orgId: string, key: SystemRoleKey): Promise<string> {
  return (await db.selectFrom('roles').select('id').where('org_id', '=', orgId).where('system_key', '=', key).executeTakeFirstOrThrow()).id;
}
