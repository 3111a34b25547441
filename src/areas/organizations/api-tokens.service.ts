import type { components } from '../../../generated/openapi';
import { mintApiToken, revokeApiToken } from '../../identity/api-tokens';
import { PERMISSIONS } from '../../identity/permissions';
import type { Executor } from '../../db/database';
import type { RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';

type ApiToken = components['schemas']['ApiToken'];
type ApiTokenCreate = components['schemas']['ApiTokenCreate'];
type ApiTokenCreated = components['schemas']['ApiTokenCreated'];
type ApiTokenStatus = components['schemas']['ApiTokenStatus'];

const NAME_CONSTRAINT = 'api_tokens_owner_name_key';
const MAX_LIFETIME_MS = 366 * 86_400_000;

/** Live tokens (not revoked) of members who are still members (not removed), with their owner's standing. */
function liveTokens(db: Executor, orgId: string) {
  return db
    .selectFrom('api_tokens as t')
    .innerJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 't.org_id').onRef('m.user_id', '=', 't.user_id'))
    .select([
      't.id',
      't.name',
      't.token_hint',
      't.user_id',
      't.permissions',
      't.expires_at',
      't.last_used_at',
      't.created_at',
      't.updated_at',
      'm.status as member_status',
    ])
    .where('t.org_id', '=', orgId)
    .where('t.revoked_at', 'is', null)
    .where('m.status', '<>', 'removed');
}

type TokenRow = Awaited<ReturnType<ReturnType<typeof liveTokens>['executeTakeFirstOrThrow']>>;

const inCatalogOrder = (permissions: readonly string[]) => [...permissions].sort();

function statusOf(row: TokenRow, now: Date): ApiTokenStatus {
  if (row.member_status === 'suspended') return 'owner_suspended';
  if (row.expires_at && row.expires_at <= now) return 'expired';
  return 'active';
}

function toApiToken(row: TokenRow, now = new Date()): ApiToken {
  return {
    id: row.id,
    name: row.name,
    token_hint: row.token_hint,
    owner_user_id: row.user_id,
    permissions: inCatalogOrder(row.permissions) as ApiToken['permissions'],
    status: statusOf(row, now),
    expires_at: row.expires_at?.toISOString() ?? null,
    last_used_at: row.last_used_at?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

const mayManageMembers = (ctx: RequestContext) => ctx.org?.permissions.has('member:manage') === true;

export async function list(
  ctx: RequestContext,
  page: PageRequest,
  filter: { user_id?: string; all?: boolean; status?: ApiTokenStatus },
): Promise<Page<ApiToken>> {
  if (filter.all && filter.user_id !== undefined) {
    throw validationError([{ in: 'query', pointer: '/all', message: 'cannot be combined with user_id' }]);
  }
  const ownerId = filter.all ? null : (filter.user_id ?? ctx.user);
  if (ownerId !== ctx.user && !mayManageMembers(ctx)) {
    throw new ApiError('missing_permission', "Listing other members' tokens needs the permission member:manage.");
  }
  if (ownerId !== null && ownerId !== ctx.user) {
    const member = await ctx.db.selectFrom('memberships').select('status').where('org_id', '=', ctx.orgId).where('user_id', '=', ownerId).executeTakeFirst();
    if (!member || member.status === 'removed') {
      throw new ApiError('unknown_reference', `${ownerId} is not a member of this organization.`, {
        errors: [{ in: 'query', pointer: '/user_id', message: 'is not a member of this organization' }],
      });
    }
  }
  const now = new Date();
  const rows = await liveTokens(ctx.db, ctx.orgId)
    .$if(ownerId !== null, (q) => q.where('t.user_id', '=', ownerId as string))
    .$if(page.after !== undefined, (q) => q.where('t.id', '>', page.after as string))
    .$if(filter.status === 'owner_suspended', (q) => q.where('m.status', '=', 'suspended'))
    .$if(filter.status === 'expired', (q) => q.where('m.status', '=', 'active').where('t.expires_at', '<=', now))
    .$if(filter.status === 'active', (q) =>
      q.where('m.status', '=', 'active').where((eb) => eb.or([eb('t.expires_at', 'is', null), eb('t.expires_at', '>', now)])),
    )
    .orderBy('t.id')
    .limit(page.limit + 1)
    .execute();
  return toPage(rows, page, (row) => toApiToken(row, now));
}

export async function create(ctx: RequestContext, body: ApiTokenCreate): Promise<ApiTokenCreated> {
  let expiresAt: Date | null = null;
  if (body.expires_at) {
    expiresAt = new Date(body.expires_at);
    const now = Date.now();
    if (expiresAt.getTime() <= now) throw validationError([{ in: 'body', pointer: '/expires_at', message: 'must be in the future' }]);
    if (expiresAt.getTime() > now + MAX_LIFETIME_MS) throw validationError([{ in: 'body', pointer: '/expires_at', message: 'must be at most 366 days away' }]);
  }
  // A ceiling the caller cannot raise: only permissions they hold now.
  const held = ctx.org?.permissions ?? new Set<string>();
  const lacking = body.permissions.filter((p) => !held.has(p));
  if (lacking.length > 0) {
    throw new ApiError('permission_escalation', `A token cannot carry permissions its owner does not hold: ${lacking.join(', ')}.`);
  }
  const permissions = PERMISSIONS.filter((p) => body.permissions.includes(p));
  return conflictOnUnique(
    NAME_CONSTRAINT,
    () => new ApiError('name_taken', `You already have a token named "${body.name}" in this organization.`),
    () =>
      ctx.write(async (w) => {
        const minted = await mintApiToken(w.db, { orgId: ctx.orgId, userId: ctx.user, name: body.name, permissions, expiresAt });
        const row = await liveTokens(w.db, ctx.orgId).where('t.id', '=', minted.id).executeTakeFirstOrThrow();
        w.audit({ targetId: minted.id, changes: { name: body.name, permissions, expires_at: expiresAt?.toISOString() ?? null } });
        return { token: minted.token, api_token: toApiToken(row) };
      }),
  );
}

/**
 * Revokes a token: the caller's own, or (with member:manage) another member's. A token the
 * caller may not revoke is 404, as if it did not exist. Committing the revocation notifies
 * every server (the api_tokens trigger), so it is refused from the next request on.
 */
export async function revoke(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await w.db
      .selectFrom('api_tokens')
      .select(['id', 'user_id', 'name'])
      .where('org_id', '=', ctx.orgId)
      .where('id', '=', id)
      .where('revoked_at', 'is', null)
      .forUpdate()
      .executeTakeFirst();
    if (!row || (row.user_id !== ctx.user && !mayManageMembers(ctx))) throw notFound('API token', id);
    await revokeApiToken(w.db, id);
    w.audit({ targetId: id, changes: { name: row.name, owner_user_id: row.user_id } });
  });
}
