import type { Executor } from '../../db/database';
import type { MembershipStatus, MembershipVia } from '../../db/schema';

/** Makes a person a member of an organization, holding the given roles. */
export async function addMember(
  db: Executor,
  input: { orgId: string; userId: string; status?: MembershipStatus; via: MembershipVia; roleIds?: readonly string[] },
): Promise<void> {
  await db.insertInto('memberships').values({ org_id: input.orgId, user_id: input.userId, status: input.status ?? 'active', via: input.via }).execute();
  if (input.roleIds && input.roleIds.length > 0) {
    await db.insertInto('role_assignments').values(input.roleIds.map((roleId) => ({ org_id: input.orgId, user_id: input.userId, role_id: roleId }))).execute();
  }
}
