import type { Db } from '../../db/database';
import { effectivePermissions, inactiveMember, rolesHeld, type Authenticator } from '../../identity/credentials';
import { findClient, secretMatches } from './clients';
import { scopesOf } from './grants';
import { verifiedJwt } from './keys';

/**
 * Where a grant stops: whatever ends the person's access to the MCP server ends its tokens on
 * their next use. Read with the token itself, so an access token and a refresh both see it.
 */
export async function grantStanding(db: Db, grantId: string, now = new Date()) {
  const row = await standingQuery(db).where('g.id', '=', grantId).executeTakeFirst();
  return standingOf(row, now);
}

/** The grant, its MCP server, and the person's membership there: what decides whether the grant holds. */
function standingQuery(db: Db) {
  return db
    .selectFrom('oauth_grants as g')
    .innerJoin('mcp_servers as s', 's.id', 'g.mcp_server_id')
    .leftJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 's.org_id').onRef('m.user_id', '=', 'g.user_id'))
    .leftJoin('organizations as o', 'o.id', 's.org_id')
    .select(['g.id', 'g.user_id', 'g.client_id', 'g.mcp_server_id', 'g.scope', 'g.created_at', 'g.expires_at', 'g.revoked_at', 's.org_id', 's.owner_user_id'])
    .select(['s.expires_at as server_expires_at', 's.token_rotated_at', 'm.status', 'o.require_mfa', ...rolesHeld('m')]);
}

type StandingRow = Awaited<ReturnType<ReturnType<typeof standingQuery>['executeTakeFirst']>>;

function standingOf<R extends NonNullable<StandingRow>>(row: R | undefined, now: Date) {
  if (!row) return { live: false as const, detail: 'The grant was withdrawn, or its MCP server was deleted.' };
  const detail =
    row.revoked_at !== null
      ? 'The grant was withdrawn; authorize again.'
      : row.expires_at <= now
        ? 'The grant expired (90 days after consent); authorize again.'
        : row.owner_user_id !== row.user_id
          ? 'The MCP server no longer belongs to the person who authorized it.'
          : row.server_expires_at && row.server_expires_at <= now
            ? 'The MCP server has expired.'
            : row.token_rotated_at && row.token_rotated_at >= row.created_at
              ? 'The MCP server’s credentials were rotated after this grant; authorize again.'
              : row.status !== 'active' || row.require_mfa === null
                ? inactiveMember(row.status === 'suspended' || row.status === 'removed' ? row.status : 'none', row.org_id, 'The authorizing person’s')
                : null;
  return detail ? { live: false as const, detail } : { live: true as const, row };
}

const looksLikeJwt = (secret: string) => /^eyJ[\w-]*\.[\w-]+\.[\w-]+$/.test(secret);

/**
 * The `mcpOAuth` scheme: an access token from /oauth/token (a JWT this server signed, `typ`
 * at+jwt) whose id is stored. Remembered by the credential cache until it expires: every table
 * read here notifies on change (the token and grant since 2026_11_27_151000), so a revoked
 * token, a withdrawn grant or a person who lost access stops at once on every server.
 */
export const oauthAccessTokenAuthenticator: Authenticator = {
  describes: 'an OAuth access token',
  // Nothing to note per use: the grant's last use is when a token was last issued for it.
  cache: { recordUse: () => undefined },
  howToSend: 'send an OAuth access token from /oauth/token as "Authorization: Bearer …"',
  recognizes: (credential) => credential.scheme === 'bearer' && looksLikeJwt(credential.secret),
  async authenticate(credential, db, now = new Date()) {
    const claims = await verifiedJwt(db, credential.secret, 'at+jwt');
    if (!claims || typeof claims.jti !== 'string') return { status: 'invalid', detail: 'The access token is not one this server issued.' };
    // One query per use: the token, its grant, the server and the membership together.
    const found = await standingQuery(db)
      .innerJoin('oauth_access_tokens as t', 't.grant_id', 'g.id')
      .select(['t.scope as token_scope', 't.expires_at as token_expires_at', 't.revoked_at as token_revoked_at'])
      .where('t.jti', '=', claims.jti)
      .executeTakeFirst();
    if (!found || found.token_revoked_at) return { status: 'invalid', detail: 'The access token was revoked, or its grant withdrawn.' };
    if (found.token_expires_at <= now) return { status: 'invalid', detail: 'The access token expired; refresh it.' };
    const standing = standingOf(found, now);
    if (!standing.live) return { status: 'invalid', detail: standing.detail };
    const { row } = standing;
    const token = { scope: row.token_scope, expires_at: row.token_expires_at };
    // The audience is the grant's server; a token whose claim says otherwise was not minted here.
    if (typeof claims.aud !== 'string' || !claims.aud.endsWith(`/mcp/${row.mcp_server_id}`)) {
      return { status: 'invalid', detail: 'The access token is not one this server issued.' };
    }
    return {
      status: 'ok',
      caller: {
        kind: 'mcp_client',
        userId: row.user_id,
        via: 'oauth',
        mcpServerId: row.mcp_server_id,
        clientId: row.client_id,
        orgId: row.org_id,
        expiresAt: token.expires_at,
        scopes: scopesOf(token.scope),
        grantId: row.id,
        access: { orgId: row.org_id, requireMfa: row.require_mfa ?? false, permissions: effectivePermissions(row, null) },
      },
    };
  },
};

/**
 * The `oauthClient` scheme (`client_secret_basic`, RFC 6749 §2.3.1): the client id and secret
 * are form-encoded before they are joined and base64-encoded, so each half is decoded again.
 */
export const oauthClientAuthenticator: Authenticator = {
  describes: 'OAuth client credentials (HTTP Basic)',
  howToSend: 'send the client id and secret as HTTP Basic credentials',
  recognizes: (credential) => credential.scheme === 'basic',
  async authenticate(credential, db) {
    const decoded = Buffer.from(credential.secret, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return { status: 'invalid', detail: 'The Basic credentials are not "client_id:client_secret".' };
    let clientId: string;
    let secret: string;
    try {
      clientId = decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, ' '));
      secret = decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, ' '));
    } catch {
      return { status: 'invalid', detail: 'The Basic credentials are not form-encoded.' };
    }
    // Only registered clients have secrets: a metadata document's URL is never fetched here.
    const client = clientId.startsWith('oac_') ? await findClient(db, clientId, { allowLoopback: false, allowPrivate: false }) : null;
    if (!client || !secretMatches(client, secret)) return { status: 'invalid', detail: 'The client is unknown or its secret does not match.' };
    return { status: 'ok', caller: { kind: 'oauth_client', userId: null, clientId: client.id } };
  },
};
