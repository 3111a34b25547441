import type { Executor } from '../../db/database';
import { newId } from '../../lib/ids';

export async function insertTeam(db: Executor, input: { orgId: string; name: string; description?: string | null; createdByUserId?: string | null }): Promise<string> {
  const id = newId('team');
  await db.insertInto('teams').values({ id, org_id: input.orgId, name: input.name, description: input.description ?? null, created_by_user_id: input.createdByUserId ?? null }).execute();
  return id;
}

export async function addTeamMember(db: Executor, input: { teamId: string; orgId: string; userId: string; addedByUserId?: string | null }): Promise<void> {
  await db.insertInto('team_members').values({ team_id: input.teamId, org_id: input.orgId, user_id: input.userId, added_by_user_id: input.addedByUserId ?? null }).execute();
}
