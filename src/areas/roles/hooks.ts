import type { Executor } from '../../db/database';

/**
 * Where other areas tell what still names a custom role, so that deleteRole answers 409
 * `role_in_use` instead of silently taking it away: pending invites, an org domain's or an
 * SSO connection's default role, group mappings. Members holding it and restrictions naming
 * it are counted by this area itself. Each hook counts its own, inside the delete's
 * transaction: `roleUsageHooks.push(async (db, orgId, roleId) => ({ count, what: 'pending invites' }))`.
 */
export type RoleUsageHook = (db: Executor, orgId: string, roleId: string) => Promise<{ count: number; what: string }>;
export const roleUsageHooks: RoleUsageHook[] = [];

/** What still names the role, in words ("2 pending invites"); empty when nothing does. */
export async function roleUsagesFromHooks(db: Executor, orgId: string, roleId: string): Promise<string[]> {
  const found: string[] = [];
  for (const hook of roleUsageHooks) {
    const { count, what } = await hook(db, orgId, roleId);
    if (count > 0) found.push(`${count} ${what}`);
  }
  return found;
}
