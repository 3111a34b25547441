import type { components } from '../../../generated/openapi';
import type { ApiTokenCaller, SessionCaller } from '../../identity/credentials';
import { rolePermissions } from '../../identity/permissions';
import type { Db } from '../../db/database';
import { ApiError } from '../../http/errors';
import { toOrganization } from '../organizations';
import * as repo from './current-user.repo';

type CurrentUser = components['schemas']['CurrentUser'];
type Permission = components['schemas']['Permission'];

/** The most organization ids `mfa_setup_required_org_ids` lists (service description §8). */
export const MFA_ORG_PAGE = 50;

function groupBy<T extends { org_id: string }>(rows: T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const row of rows) {
    const list = groups.get(row.org_id);
    if (list) list.push(row);
    else groups.set(row.org_id, [row]);
  }
  return groups;
}

export function blockedReason(requiring: { name: string }[]): string {
  const names = requiring.slice(0, 3).map((o) => o.name);
  const more = requiring.length > 3 ? ` and ${requiring.length - 3} more` : '';
  const subject = requiring.length === 1 ? `${names[0]} requires` : `${names.join(', ')}${more} require`;
  return `${subject} a second factor and you have no passkey; add a passkey before turning off TOTP.`;
}

/** `GET /user/me` takes an API token or a session (its security schemes); no other credential reaches it. */
export async function currentUser(db: Db, caller: ApiTokenCaller | SessionCaller, currentOrgId: string | undefined): Promise<CurrentUser> {
  const profile = await repo.findUserProfile(db, caller.userId);
  if (!profile) throw new ApiError('invalid_token', 'The credential belongs to a user that no longer exists.');

  const allMemberships = await repo.listActiveMemberships(db, caller.userId);
  // A token acts only in its own organization, so it is the only one worth listing.
  const memberships = caller.kind === 'api_token' ? allMemberships.filter((m) => m.id === caller.orgId) : allMemberships;
  const orgIds = memberships.map((m) => m.id);
  const [roles, teams] = await Promise.all([repo.listRolesHeld(db, caller.userId, orgIds), repo.listTeamsJoined(db, caller.userId, orgIds)]);
  const rolesByOrg = groupBy(roles);
  const teamsByOrg = groupBy(teams);
  const tokenGrant = caller.kind === 'api_token' ? new Set(caller.tokenPermissions) : null;

  const organizations = memberships.map((m) => {
    const held = rolesByOrg.get(m.id) ?? [];
    const union = new Set(held.flatMap((r) => rolePermissions(r)));
    const effective = [...union].filter((p) => !tokenGrant || tokenGrant.has(p)).sort() as Permission[];
    return {
      organization: toOrganization(m),
      member: { user_id: m.user_id, status: m.status, via: m.via, joined_at: m.joined_at.toISOString() },
      roles: held.map((r) => ({ id: r.id, name: r.name, is_system: r.is_system, seat_class: r.seat_class })),
      teams: (teamsByOrg.get(m.id) ?? []).map((t) => ({ id: t.id, name: t.name })),
      permissions: effective,
    };
  });

  // A token sees its own organization only, in the second-factor members too (their reason names organizations).
  const requiringMfa = memberships.filter((m) => m.require_mfa);
  const refusing = caller.kind === 'session' && !caller.secondFactorAt ? requiringMfa.map((m) => m.id) : [];
  const ordered = currentOrgId && refusing.includes(currentOrgId) ? [currentOrgId, ...refusing.filter((id) => id !== currentOrgId)] : refusing;
  const canDisableMfa = !(requiringMfa.length > 0 && profile.passkey_count === 0);

  return {
    id: profile.id,
    email: profile.email,
    name: profile.name,
    avatar_url: profile.avatar_url,
    created_at: profile.created_at.toISOString(),
    updated_at: profile.updated_at.toISOString(),
    mfa_enabled: profile.totp_enabled_at !== null,
    mfa_setup_required: refusing.length > 0,
    mfa_setup_required_org_ids: ordered.slice(0, MFA_ORG_PAGE),
    mfa_setup_required_org_count: refusing.length,
    can_disable_mfa: canDisableMfa,
    mfa_disable_blocked_reason: canDisableMfa ? null : blockedReason(requiringMfa),
    passkey_count: profile.passkey_count,
    is_root_org_staff: profile.is_root_org_staff,
    organizations,
    credential:
      caller.kind === 'api_token'
        ? {
            type: 'api_token',
            id: caller.tokenId,
            organization_id: caller.orgId,
            permissions: [...caller.tokenPermissions].sort() as Permission[],
            expires_at: caller.expiresAt?.toISOString() ?? null,
          }
        : { type: 'session', id: caller.sessionId, organization_id: null, permissions: null, expires_at: caller.expiresAt.toISOString() },
  };
}
