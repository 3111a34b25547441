import { isActiveMember, rolesHeld } from '../../identity/credentials';
import { heldPermissions } from '../../identity/permissions';
import { isSharedWith } from '../../access/shares';
import type { Db, Executor } from '../../db/database';
import type { SecretBox } from '../../lib/crypto';
import { builtIns } from './catalog';
import type { ConnectorContent, StoredAuth } from './content';
import { findConnector, type ConnectorRow } from './connectors.repo';

/** The associated data a custom connector's OAuth client secret is sealed with. */
export const clientSecretContext = (orgId: string, slug: string): string => `connector:${orgId}:${slug}`;

export interface ResolvedConnector {
  slug: string;
  source: 'built_in' | 'custom';
  version: number;
  name: string;
  mcp_url: string;
  transport: 'streamable_http' | 'sse';
  auth: ResolvedAuth;
}

/** A connector's auth settings with the OAuth client secret opened: never log it, never return it. */
export type ResolvedAuth = Exclude<StoredAuth, { type: 'oauth2' }> | (Extract<StoredAuth, { type: 'oauth2' }> & { client_secret: string | null });

/**
 * Whether a member sees a custom connector: holders of `connector:manage` see every custom
 * connector of the organization, others those shared with them (directly, through a team, or
 * with the organization).
 */
export function visibleTo(db: Executor, orgId: string, userId: string, canManage: boolean, slug: string): Promise<boolean> {
  return canManage ? Promise.resolve(true) : isSharedWith(db, orgId, userId, 'connector', slug);
}

/**
 * Where a slug leads in an organization: its custom connector when it has one (visible to the
 * caller or not), else the built-in one, else nothing. A custom connector hides a built-in one
 * of the same slug that a later catalog adds.
 */
export async function lookup(
  db: Executor,
  orgId: string,
  slug: string,
  forUpdate = false,
): Promise<{ source: 'custom'; row: ConnectorRow } | { source: 'built_in'; content: ConnectorContent; version: number } | null> {
  const row = await findConnector(db, orgId, slug, forUpdate);
  if (row) return { source: 'custom', row };
  const entry = builtIns().entries.get(slug);
  return entry ? { source: 'built_in', content: entry.content, version: entry.version } : null;
}

/** The connector as `userId` sees it in `orgId` (built-in, or custom visible through manage or a share); null when not visible. */
export async function resolveConnector(
  db: Db,
  secrets: SecretBox,
  orgId: string,
  userId: string,
  canManage: boolean,
  slug: string,
): Promise<ResolvedConnector | null> {
  const found = await lookup(db, orgId, slug);
  if (!found) return null;
  if (found.source === 'custom' && !(await visibleTo(db, orgId, userId, canManage, slug))) return null;
  return resolvedOf(secrets, orgId, slug, found);
}

/**
 * The connector as a member sees it now by their roles (seesConnector, then resolveConnector,
 * with one lookup): what a call through the member's connection uses. Null when not visible.
 */
export async function resolveConnectorForMember(db: Db, secrets: SecretBox, orgId: string, userId: string, slug: string): Promise<ResolvedConnector | null> {
  const found = await lookup(db, orgId, slug);
  if (!found) return null;
  if (!(await memberSees(db, orgId, userId, slug, found.source))) return null;
  return resolvedOf(secrets, orgId, slug, found);
}

function resolvedOf(secrets: SecretBox, orgId: string, slug: string, found: NonNullable<Awaited<ReturnType<typeof lookup>>>): ResolvedConnector {
  const content = found.source === 'custom' ? found.row.content : found.content;
  const version = found.source === 'custom' ? found.row.version : found.version;
  const sealed = found.source === 'custom' ? found.row.client_secret_enc : null;
  const auth: ResolvedConnector['auth'] =
    content.auth.type === 'oauth2'
      ? { ...content.auth, scopes: [...content.auth.scopes], client_secret: sealed ? secrets.open(sealed, clientSecretContext(orgId, slug)) : null }
      : { ...content.auth };
  return { slug, source: found.source, version, name: content.name, mcp_url: content.mcp_url, transport: content.transport, auth };
}

/**
 * Whether a member (by their roles, not a token's narrower list) sees a connector now: every
 * built-in; a custom one with `connector:manage` or through a share. For the connections area,
 * deciding whose connections a revoked share cuts off.
 */
export async function seesConnector(db: Executor, orgId: string, userId: string, slug: string): Promise<boolean> {
  const found = await lookup(db, orgId, slug);
  return found !== null && memberSees(db, orgId, userId, slug, found.source);
}

/**
 * Whether an active member sees the connector: a suspended or departed member sees none, so
 * their connections serve nobody (a toolbox shared with others included), built-in or custom.
 */
function memberSees(db: Executor, orgId: string, userId: string, slug: string, source: 'custom' | 'built_in'): Promise<boolean> {
  return source === 'custom' ? memberSeesCustom(db, orgId, userId, slug) : isActiveMember(db, orgId, userId);
}

/** Whether an active member sees a custom connector by their roles: `connector:manage`, or a share. */
async function memberSeesCustom(db: Executor, orgId: string, userId: string, slug: string): Promise<boolean> {
  const member = await db
    .selectFrom('memberships as m')
    .select(rolesHeld('m'))
    .where('m.org_id', '=', orgId)
    .where('m.user_id', '=', userId)
    .where('m.status', '=', 'active')
    .executeTakeFirst();
  if (!member) return false;
  const canManage = heldPermissions(member.custom_permissions, member.system_keys).has('connector:manage');
  return visibleTo(db, orgId, userId, canManage, slug);
}
