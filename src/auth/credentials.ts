import { sql } from 'kysely';
import type { Db } from '../db/database';
import { hashSecret } from '../lib/crypto';

export const API_TOKEN_PREFIX = 'cpt';
export const SESSION_PREFIX = 'cps';
export const SESSION_COOKIE = 'cp_session';

export interface ApiTokenCaller {
  kind: 'api_token';
  userId: string;
  tokenId: string;
  orgId: string;
  tokenPermissions: string[];
  expiresAt: Date | null;
  /** The token's standing in its own organization, read with the token itself; null when the owner is no longer an active member. */
  access: OrgAccess | null;
}

export interface SessionCaller {
  kind: 'session';
  userId: string;
  sessionId: string;
  secondFactorAt: Date | null;
  stepUpAt: Date | null;
  expiresAt: Date;
}

export type Caller = ApiTokenCaller | SessionCaller;

export type Authentication =
  | { status: 'none' }
  | { status: 'ok'; caller: Caller; secretHash: string }
  | { status: 'invalid'; scheme: 'bearer' | 'cookie'; detail: string };

/** What a request presents, before any lookup: enough to key rate limits without the database. */
export interface PresentedCredential {
  scheme: 'bearer' | 'cookie';
  secret: string;
}

export function presentedCredential(headers: Record<string, string | string[] | undefined>): PresentedCredential | null {
  const authorization = headers.authorization;
  if (typeof authorization === 'string' && authorization !== '') {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    return { scheme: 'bearer', secret: match?.[1] ?? '' };
  }
  const cookie = headers.cookie;
  if (typeof cookie === 'string') {
    for (const part of cookie.split(';')) {
      const eq = part.indexOf('=');
      if (eq > 0 && part.slice(0, eq).trim() === SESSION_COOKIE) {
        return { scheme: 'cookie', secret: decodeCookie(part.slice(eq + 1).trim()) };
      }
    }
  }
  return null;
}

/** A cookie value with a broken percent-escape is simply a credential that matches nothing. */
function decodeCookie(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

// Only an occasional write: a token used many times a second must not write on every request.
const LAST_USED_RESOLUTION_MS = 60_000;

export async function authenticate(db: Db, presented: PresentedCredential | null, now = new Date()): Promise<Authentication> {
  if (!presented) return { status: 'none' };
  const { scheme, secret } = presented;
  if (scheme === 'bearer') {
    if (!secret.startsWith(`${API_TOKEN_PREFIX}_`)) {
      return { status: 'invalid', scheme, detail: 'The bearer token is not an API token (cpt_…).' };
    }
    const secretHash = hashSecret(secret);
    // One query for the token and its owner's standing in the token's organization: an API
    // token only ever acts there, so the guard needs nothing else from the database.
    const token = await db
      .selectFrom('api_tokens as t')
      .leftJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 't.org_id').onRef('m.user_id', '=', 't.user_id').on('m.status', '=', 'active'))
      .leftJoin('organizations as o', 'o.id', 'm.org_id')
      .select(['t.id', 't.org_id', 't.user_id', 't.permissions', 't.expires_at', 't.revoked_at', 't.last_used_at', 'o.require_mfa', memberPermissions('m')])
      .where('t.token_hash', '=', secretHash)
      .executeTakeFirst();
    if (!token || token.revoked_at) return { status: 'invalid', scheme, detail: 'The API token is unknown or revoked.' };
    if (token.expires_at && token.expires_at <= now) return { status: 'invalid', scheme, detail: 'The API token has expired.' };
    if (!token.last_used_at || now.getTime() - token.last_used_at.getTime() > LAST_USED_RESOLUTION_MS) {
      // Conditional, so concurrent requests of one token (or several servers) write it once.
      const stale = new Date(now.getTime() - LAST_USED_RESOLUTION_MS);
      void db.updateTable('api_tokens').set({ last_used_at: now }).where('id', '=', token.id)
        .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', stale)]))
        .execute().catch(() => undefined);
    }
    return {
      status: 'ok',
      secretHash,
      caller: {
        kind: 'api_token',
        userId: token.user_id,
        tokenId: token.id,
        orgId: token.org_id,
        tokenPermissions: token.permissions,
        expiresAt: token.expires_at,
        access: token.require_mfa === null ? null : {
          orgId: token.org_id,
          requireMfa: token.require_mfa,
          permissions: effectivePermissions(token.permissions_held, token.permissions),
        },
      },
    };
  }
  const secretHash = hashSecret(secret);
  const session = await db
    .selectFrom('sessions')
    .select(['id', 'user_id', 'second_factor_at', 'step_up_at', 'expires_at', 'revoked_at', 'last_seen_at'])
    .where('token_hash', '=', secretHash)
    .executeTakeFirst();
  if (!session || session.revoked_at || session.expires_at <= now) {
    return { status: 'invalid', scheme, detail: 'The session has ended; sign in again.' };
  }
  if (!session.last_seen_at || now.getTime() - session.last_seen_at.getTime() > LAST_USED_RESOLUTION_MS) {
    const stale = new Date(now.getTime() - LAST_USED_RESOLUTION_MS);
    void db.updateTable('sessions').set({ last_seen_at: now }).where('id', '=', session.id)
      .where((eb) => eb.or([eb('last_seen_at', 'is', null), eb('last_seen_at', '<', stale)]))
      .execute().catch(() => undefined);
  }
  return {
    status: 'ok',
    secretHash,
    caller: {
      kind: 'session',
      userId: session.user_id,
      sessionId: session.id,
      secondFactorAt: session.second_factor_at,
      stepUpAt: session.step_up_at,
      expiresAt: session.expires_at,
    },
  };
}

export interface OrgAccess {
  orgId: string;
  requireMfa: boolean;
  /** Effective permissions: the union of the member's roles, intersected with a token's list. */
  permissions: ReadonlySet<string>;
}

/** The union of the permissions of the roles a membership row holds; `{}` when none or no row. */
function memberPermissions(membership: 'm') {
  return sql<string[]>`coalesce((
    select array_agg(distinct p.permission)
    from role_assignments ra
    join roles r on r.id = ra.role_id
    cross join lateral unnest(r.permissions) as p(permission)
    where ra.org_id = ${sql.ref(`${membership}.org_id`)} and ra.user_id = ${sql.ref(`${membership}.user_id`)}
  ), '{}')`.as('permissions_held');
}

/** What a member may do: the roles' permissions, intersected with a token's own list when there is one. */
function effectivePermissions(held: string[], tokenPermissions: string[] | null): ReadonlySet<string> {
  if (!tokenPermissions) return new Set(held);
  const granted = new Set(tokenPermissions);
  return new Set(held.filter((p) => granted.has(p)));
}

/** The caller's standing in one organization, or null when not an active member. At most one query. */
export async function loadOrgAccess(db: Db, caller: Caller, orgId: string): Promise<OrgAccess | null> {
  if (caller.kind === 'api_token') return caller.orgId === orgId ? caller.access : null;
  const row = await db
    .selectFrom('memberships as m')
    .innerJoin('organizations as o', 'o.id', 'm.org_id')
    .select(['o.require_mfa', memberPermissions('m')])
    .where('m.org_id', '=', orgId)
    .where('m.user_id', '=', caller.userId)
    .where('m.status', '=', 'active')
    .executeTakeFirst();
  if (!row) return null;
  return { orgId, requireMfa: row.require_mfa, permissions: effectivePermissions(row.permissions_held, null) };
}
