import { sql } from 'kysely';
import type { Db, Executor } from '../db/database';
import { hashSecret } from '../lib/crypto';
import { heldPermissions } from './permissions';

export const API_TOKEN_PREFIX = 'cpt';
export const SESSION_PREFIX = 'cps';
/** `__Host-`: browsers keep it to this host over HTTPS, so a sibling subdomain cannot plant one. */
export const SESSION_COOKIE = '__Host-cp_session';
/** A session ends after this long without use (the `session` security scheme's description). */
export const SESSION_IDLE_MS = 14 * 24 * 3600_000;

/** The caller's standing in one organization. */
export interface OrgAccess {
  orgId: string;
  requireMfa: boolean;
  /** Effective permissions: the union of the member's roles, intersected with a token's own list. */
  permissions: ReadonlySet<string>;
}

export interface ApiTokenCaller {
  kind: 'api_token';
  userId: string;
  tokenId: string;
  orgId: string;
  tokenPermissions: string[];
  expiresAt: Date | null;
  /** The token's standing in its own organization, read with the token itself (its owner is an active member there). */
  access: OrgAccess;
}

export interface SessionCaller {
  kind: 'session';
  userId: string;
  sessionId: string;
  secondFactorAt: Date | null;
  stepUpAt: Date | null;
  expiresAt: Date;
}

/** An organization's identity provider with a SCIM token: bound to that organization, acting for no person. */
export interface ScimTokenCaller {
  kind: 'scim_token';
  userId: null;
  tokenId: string;
  orgId: string;
  access: OrgAccess;
}

/** An MCP client, with its MCP server's token or an OAuth access token: acts for a person, in that server's organization. */
export interface McpClientCaller {
  kind: 'mcp_client';
  userId: string;
  via: 'server_token' | 'oauth';
  mcpServerId: string;
  /** The OAuth client, when the credential came from /oauth/token. */
  clientId: string | null;
  orgId: string;
  access: OrgAccess | null;
  /** When the credential stops working (the MCP server's `expires_at`, an access token's expiry), or null for never. */
  expiresAt?: Date | null;
  /** An OAuth access token's granted scopes (an MCP server's own token has none: it may do what its minter may). */
  scopes?: readonly string[];
  /** The OAuth grant the access token was issued under. */
  grantId?: string;
}

/** A confidential OAuth client authenticated by its secret (HTTP Basic) at the token and revocation endpoints: acts for no person. */
export interface OAuthClientCaller {
  kind: 'oauth_client';
  userId: null;
  clientId: string;
}

export type Caller = ApiTokenCaller | SessionCaller | ScimTokenCaller | McpClientCaller | OAuthClientCaller;

/** What a request presents, before any lookup: enough to choose a scheme and key rate limits without the database. */
export interface PresentedCredential {
  /** `other`: an Authorization header of a scheme this server does not speak. */
  scheme: 'bearer' | 'basic' | 'cookie' | 'other';
  secret: string;
}

export function presentedCredential(headers: Record<string, string | string[] | undefined>): PresentedCredential | null {
  const authorization = headers.authorization;
  if (typeof authorization === 'string' && authorization !== '') {
    const match = /^(Bearer|Basic)\s+(\S+)\s*$/i.exec(authorization);
    if (!match) return { scheme: /^Bearer\b/i.test(authorization) ? 'bearer' : 'other', secret: '' };
    return { scheme: match[1]?.toLowerCase() === 'basic' ? 'basic' : 'bearer', secret: match[2] ?? '' };
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

export type AuthenticationResult = { status: 'ok'; caller: Caller } | { status: 'invalid'; detail: string };

/**
 * How one security scheme of the spec turns a presented credential into a caller. The
 * machinery brings `apiToken` and `session`; an area that builds a protocol registers its
 * own (`scimToken`, `mcpToken`, …) in its area definition.
 */
export interface Authenticator {
  /** Whether the credential has this scheme's form (a cookie, a bearer token with its prefix): only then is it looked up. */
  recognizes(credential: PresentedCredential): boolean;
  authenticate(credential: PresentedCredential, db: Db, now?: Date): Promise<AuthenticationResult>;
  /** How a person names this credential in an error ("an API token"). */
  describes: string;
  /** What to do to present one, for a 401 without any credential ("sign in"). */
  howToSend: string;
  /**
   * Present when a successful answer may be remembered (src/identity/credential-cache.ts): only
   * when every table `authenticate` reads notifies `cp_credentials` on change (a migration
   * adds the trigger with `notifyCredentialChanges`). `recordUse` then notes a use the cache
   * answered, as `authenticate` would have.
   */
  cache?: { recordUse(caller: Caller, db: Db, now: Date): void };
}

// Only an occasional write: a credential used many times a second must not write on every request.
const LAST_USED_RESOLUTION_MS = 60_000;

/**
 * Records when a credential was last used, at most once a minute, and never waiting for it:
 * conditional, so concurrent requests (or several servers) write it once.
 */
export function touchLastUsed(
  db: Db,
  table: 'api_tokens' | 'sessions' | 'mcp_servers',
  column: 'last_used_at' | 'last_seen_at',
  id: string,
  last: Date | null,
  now: Date,
): void {
  if (last && now.getTime() - last.getTime() <= LAST_USED_RESOLUTION_MS) return;
  const stale = new Date(now.getTime() - LAST_USED_RESOLUTION_MS);
  void db
    .updateTable(table as 'api_tokens')
    .set({ [column]: now } as never)
    .where('id', '=', id)
    .where((eb) => eb.or([eb(column as 'last_used_at', 'is', null), eb(column as 'last_used_at', '<', stale)]))
    .execute()
    .catch(() => undefined);
}

export const apiTokenAuthenticator: Authenticator = {
  describes: 'an API token',
  cache: {
    recordUse(caller, db, now) {
      if (caller.kind === 'api_token') touchLastUsed(db, 'api_tokens', 'last_used_at', caller.tokenId, null, now);
    },
  },
  howToSend: 'send an API token as "Authorization: Bearer cpt_…"',
  recognizes: (credential) => credential.scheme === 'bearer' && credential.secret.startsWith(`${API_TOKEN_PREFIX}_`),
  async authenticate(credential, db, now = new Date()) {
    // One query for the token and its owner's standing in the token's organization: an API
    // token only ever acts there, so the guard needs nothing else from the database.
    const token = await db
      .selectFrom('api_tokens as t')
      .leftJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 't.org_id').onRef('m.user_id', '=', 't.user_id'))
      .leftJoin('organizations as o', 'o.id', 't.org_id')
      .select([
        't.id',
        't.org_id',
        't.user_id',
        't.permissions',
        't.expires_at',
        't.revoked_at',
        't.last_used_at',
        'm.status',
        'o.require_mfa',
        ...rolesHeld('m'),
      ])
      .where('t.token_hash', '=', hashSecret(credential.secret))
      .executeTakeFirst();
    if (!token || token.revoked_at) return { status: 'invalid', detail: 'The API token is unknown or revoked.' };
    if (token.expires_at && token.expires_at <= now) return { status: 'invalid', detail: 'The API token has expired.' };
    // A token acts for its owner: it stops when they stop being an active member.
    if (token.status !== 'active' || token.require_mfa === null) {
      return {
        status: 'invalid',
        detail: inactiveMember(token.status === 'suspended' || token.status === 'removed' ? token.status : 'none', token.org_id, 'This API token’s owner’s'),
      };
    }
    touchLastUsed(db, 'api_tokens', 'last_used_at', token.id, token.last_used_at, now);
    return {
      status: 'ok',
      caller: {
        kind: 'api_token',
        userId: token.user_id,
        tokenId: token.id,
        orgId: token.org_id,
        tokenPermissions: token.permissions,
        expiresAt: token.expires_at,
        access: { orgId: token.org_id, requireMfa: token.require_mfa, permissions: effectivePermissions(token, token.permissions) },
      },
    };
  },
};

export const sessionAuthenticator: Authenticator = {
  describes: 'a session',
  cache: {
    recordUse(caller, db, now) {
      if (caller.kind === 'session') touchLastUsed(db, 'sessions', 'last_seen_at', caller.sessionId, null, now);
    },
  },
  howToSend: 'sign in',
  recognizes: (credential) => credential.scheme === 'cookie',
  async authenticate(credential, db, now = new Date()) {
    const session = await db
      .selectFrom('sessions')
      .select(['id', 'user_id', 'second_factor_at', 'step_up_at', 'expires_at', 'revoked_at', 'created_at', 'last_seen_at'])
      .where('token_hash', '=', hashSecret(credential.secret))
      .executeTakeFirst();
    if (!session || session.revoked_at || session.expires_at <= now) {
      return { status: 'invalid', detail: 'The session has ended; sign in again.' };
    }
    // Idle time is measured from the last recorded use, which is written at most once a
    // minute: a session can outlive its idle limit by that minute, never by more.
    const lastUse = session.last_seen_at ?? session.created_at;
    if (now.getTime() - lastUse.getTime() >= SESSION_IDLE_MS) {
      return { status: 'invalid', detail: 'The session ended after 14 days without use; sign in again.' };
    }
    touchLastUsed(db, 'sessions', 'last_seen_at', session.id, session.last_seen_at, now);
    return {
      status: 'ok',
      caller: {
        kind: 'session',
        userId: session.user_id,
        sessionId: session.id,
        secondFactorAt: session.second_factor_at,
        stepUpAt: session.step_up_at,
        // What a remembered answer may be trusted until: this use restarts the idle clock.
        expiresAt: new Date(Math.min(session.expires_at.getTime(), now.getTime() + SESSION_IDLE_MS)),
      },
    };
  },
};

/**
 * What the roles of a membership row grant, as two columns: custom roles' permissions
 * (stored) and system roles' keys (their permissions come from the catalog). Empty for no row.
 */
export function rolesHeld(membership: 'm') {
  const orgId = sql.ref(`${membership}.org_id`);
  const userId = sql.ref(`${membership}.user_id`);
  return [
    sql<string[]>`coalesce((
      select array_agg(distinct p.permission)
      from role_assignments ra
      join roles r on r.id = ra.role_id and r.system_key is null
      cross join lateral unnest(r.permissions) as p(permission)
      where ra.org_id = ${orgId} and ra.user_id = ${userId}
    ), '{}')`.as('custom_permissions'),
    sql<string[]>`coalesce((
      select array_agg(r.system_key)
      from role_assignments ra
      join roles r on r.id = ra.role_id and r.system_key is not null
      where ra.org_id = ${orgId} and ra.user_id = ${userId}
    ), '{}')`.as('system_keys'),
  ] as const;
}

/** What a member may do: the roles' permissions, intersected with a token's own list when there is one. */
export function effectivePermissions(held: { custom_permissions: string[]; system_keys: string[] }, tokenPermissions: string[] | null): ReadonlySet<string> {
  const permissions = heldPermissions(held.custom_permissions, held.system_keys);
  if (!tokenPermissions) return permissions;
  const granted = new Set(tokenPermissions);
  return new Set([...permissions].filter((p) => granted.has(p)));
}

/** Why someone who is not an active member of an organization is refused there, in a sentence. */
export function inactiveMember(status: 'suspended' | 'removed' | 'none', orgId: string, whose: string): string {
  if (status === 'suspended') return `${whose} membership in organization ${orgId} is suspended; an administrator can reactivate it.`;
  if (status === 'removed') return `${whose} membership in organization ${orgId} was removed.`;
  return `${whose} account is not a member of organization ${orgId}.`;
}

/** Whether someone is an active member of an organization now. */
export async function isActiveMember(db: Executor, orgId: string, userId: string): Promise<boolean> {
  const row = await db
    .selectFrom('memberships')
    .select('user_id')
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .where('status', '=', 'active')
    .executeTakeFirst();
  return row !== undefined;
}

/** The status of a membership that is not active, for the refusal (`none`: there is no membership). */
export async function membershipStatus(db: Db, userId: string, orgId: string): Promise<'suspended' | 'removed' | 'none'> {
  const row = await db.selectFrom('memberships').select('status').where('org_id', '=', orgId).where('user_id', '=', userId).executeTakeFirst();
  return row && row.status !== 'active' ? row.status : 'none';
}

/** A person's standing in one organization, or null when not an active member. One query. */
export async function loadMemberAccess(db: Db, userId: string, orgId: string): Promise<OrgAccess | null> {
  const row = await db
    .selectFrom('memberships as m')
    .innerJoin('organizations as o', 'o.id', 'm.org_id')
    .select(['o.require_mfa', ...rolesHeld('m')])
    .where('m.org_id', '=', orgId)
    .where('m.user_id', '=', userId)
    .where('m.status', '=', 'active')
    .executeTakeFirst();
  if (!row) return null;
  return { orgId, requireMfa: row.require_mfa, permissions: effectivePermissions(row, null) };
}
