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
    const token = await db
      .selectFrom('api_tokens')
      .select(['id', 'org_id', 'user_id', 'permissions', 'expires_at', 'revoked_at', 'last_used_at'])
      .where('token_hash', '=', secretHash)
      .executeTakeFirst();
    if (!token || token.revoked_at) return { status: 'invalid', scheme, detail: 'The API token is unknown or revoked.' };
    if (token.expires_at && token.expires_at <= now) return { status: 'invalid', scheme, detail: 'The API token has expired.' };
    if (!token.last_used_at || now.getTime() - token.last_used_at.getTime() > LAST_USED_RESOLUTION_MS) {
      void db.updateTable('api_tokens').set({ last_used_at: now }).where('id', '=', token.id).execute().catch(() => undefined);
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
    void db.updateTable('sessions').set({ last_seen_at: now }).where('id', '=', session.id).execute().catch(() => undefined);
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

/** The caller's standing in one organization, or null when not an active member. One query. */
export async function loadOrgAccess(db: Db, caller: Caller, orgId: string): Promise<OrgAccess | null> {
  if (caller.kind === 'api_token' && caller.orgId !== orgId) return null;
  const row = await db
    .selectFrom('memberships as m')
    .innerJoin('organizations as o', 'o.id', 'm.org_id')
    .select([
      'o.require_mfa',
      sql<string[]>`coalesce((
        select array_agg(distinct p.permission)
        from role_assignments ra
        join roles r on r.id = ra.role_id
        cross join lateral unnest(r.permissions) as p(permission)
        where ra.org_id = m.org_id and ra.user_id = m.user_id
      ), '{}')`.as('permissions'),
    ])
    .where('m.org_id', '=', orgId)
    .where('m.user_id', '=', caller.userId)
    .where('m.status', '=', 'active')
    .executeTakeFirst();
  if (!row) return null;
  let permissions = new Set(row.permissions);
  if (caller.kind === 'api_token') {
    const granted = new Set(caller.tokenPermissions);
    permissions = new Set([...permissions].filter((p) => granted.has(p)));
  }
  return { orgId, requireMfa: row.require_mfa, permissions };
}
