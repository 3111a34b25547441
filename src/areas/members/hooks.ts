import type { WriteScope } from '../../http/context';

/**
 * What goes with a membership when it is removed (removeMember, and SCIM deprovisioning when
 * it lands), inside the removal's transaction, after the membership is marked `removed`.
 * Each area that owns something of the member's registers here when it loads, so nothing
 * outside the members folder lists them: connections (disconnected, `owner_left`), user
 * toolboxes and MCP servers (deleted). This area itself takes the member out of every team,
 * takes their roles and revokes their API tokens.
 */
export type MemberRemovedHook = (w: WriteScope, orgId: string, userId: string) => Promise<void>;
export const memberRemovedHooks: MemberRemovedHook[] = [];

export async function runMemberRemovedHooks(w: WriteScope, orgId: string, userId: string): Promise<void> {
  for (const hook of memberRemovedHooks) await hook(w, orgId, userId);
}
