import type { Executor } from '../../db/database';
import type { WriteScope } from '../../http/context';

/**
 * Where other areas plug into teams. Restrictions naming a team are checked by this area.
 *
 * `teamUsageHooks`: what still names a team as policy (group mappings): deleteTeam answers
 * 409 `team_in_use` while any hook counts above zero.
 *
 * `teamDeletedHooks`: a team is being deleted, inside the delete's transaction: take it out
 * of what merely mentions it (pending invites' `team_ids`). Its memberships and the shares
 * granted to it go with it here.
 *
 * `teamMembershipHooks`: people joined or left a team (added, removed, or the team deleted),
 * inside that write and after it: what the team's shares reach changed for them (their MCP
 * servers for toolboxes shared with it).
 */
export type TeamUsageHook = (db: Executor, orgId: string, teamId: string) => Promise<{ count: number; what: string }>;
export const teamUsageHooks: TeamUsageHook[] = [];

export type TeamDeletedHook = (w: WriteScope, orgId: string, teamId: string) => Promise<void>;
export const teamDeletedHooks: TeamDeletedHook[] = [];

export async function teamUsagesFromHooks(db: Executor, orgId: string, teamId: string): Promise<string[]> {
  const found: string[] = [];
  for (const hook of teamUsageHooks) {
    const { count, what } = await hook(db, orgId, teamId);
    if (count > 0) found.push(`${count} ${what}`);
  }
  return found;
}

export async function runTeamDeletedHooks(w: WriteScope, orgId: string, teamId: string): Promise<void> {
  for (const hook of teamDeletedHooks) await hook(w, orgId, teamId);
}

export type TeamMembershipHook = (w: WriteScope, orgId: string, userIds: readonly string[]) => Promise<void>;
export const teamMembershipHooks: TeamMembershipHook[] = [];

export async function runTeamMembershipHooks(w: WriteScope, orgId: string, userIds: readonly string[]): Promise<void> {
  if (userIds.length === 0) return;
  for (const hook of teamMembershipHooks) await hook(w, orgId, userIds);
}
