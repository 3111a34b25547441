import type { components } from '../../../generated/openapi';
import { requireFeature } from '../../access/entitlements';
import type { Executor } from '../../db/database';
import type { RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { mintScimToken } from '../../identity/scim-tokens';

type ScimToken = components['schemas']['ScimToken'];
type ScimTokenCreate = components['schemas']['ScimTokenCreate'];
type ScimTokenCreated = components['schemas']['ScimTokenCreated'];

const NAME_CONSTRAINT = 'scim_tokens_org_id_name_key';
/** At most two years away (createScimToken): a forgotten token should not last for ever by accident. */
const MAX_LIFETIME_MS = 2 * 366 * 86_400_000;

function liveTokens(db: Executor, orgId: string) {
  return db
    .selectFrom('scim_tokens')
    .select(['id', 'name', 'token_hint', 'expires_at', 'last_used_at', 'created_by_user_id', 'created_at', 'updated_at'])
    .where('org_id', '=', orgId)
    .where('revoked_at', 'is', null);
}

type TokenRow = Awaited<ReturnType<ReturnType<typeof liveTokens>['executeTakeFirstOrThrow']>>;

function toScimToken(row: TokenRow, now = new Date()): ScimToken {
  return {
    id: row.id,
    name: row.name,
    token_hint: row.token_hint,
    status: row.expires_at && row.expires_at <= now ? 'expired' : 'active',
    expires_at: row.expires_at?.toISOString() ?? null,
    last_used_at: row.last_used_at?.toISOString() ?? null,
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

export async function list(ctx: RequestContext, page: PageRequest): Promise<Page<ScimToken>> {
  const rows = await liveTokens(ctx.db, ctx.orgId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
  const now = new Date();
  return toPage(rows, page, (row) => toScimToken(row, now));
}

export async function create(ctx: RequestContext, body: ScimTokenCreate): Promise<ScimTokenCreated> {
  let expiresAt: Date | null = null;
  if (body.expires_at !== undefined) {
    expiresAt = new Date(body.expires_at);
    const now = Date.now();
    if (expiresAt.getTime() <= now) throw validationError([{ in: 'body', pointer: '/expires_at', message: 'must be in the future' }]);
    if (expiresAt.getTime() > now + MAX_LIFETIME_MS) throw validationError([{ in: 'body', pointer: '/expires_at', message: 'must be at most two years away' }]);
  }
  await requireFeature(ctx.db, ctx.orgId, 'scim');
  return conflictOnUnique(
    NAME_CONSTRAINT,
    () => new ApiError('name_taken', `The organization already has a SCIM token named "${body.name}".`),
    () =>
      ctx.write(async (w) => {
        const minted = await mintScimToken(w.db, { orgId: ctx.orgId, name: body.name, expiresAt, createdBy: ctx.user });
        const row = await liveTokens(w.db, ctx.orgId).where('id', '=', minted.id).executeTakeFirstOrThrow();
        w.audit({ targetId: minted.id, changes: { name: body.name, expires_at: expiresAt?.toISOString() ?? null } });
        return { token: minted.token, scim_token: toScimToken(row) };
      }),
  );
}

/** Revokes at once: the SCIM token is read on every request (never cached), so the next request with it is 401. */
export async function revoke(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await w.db
      .updateTable('scim_tokens')
      .set({ revoked_at: new Date() })
      .where('org_id', '=', ctx.orgId)
      .where('id', '=', id)
      .where('revoked_at', 'is', null)
      .returning(['name'])
      .executeTakeFirst();
    if (!row) throw notFound('SCIM token', id);
    w.audit({ targetId: id, changes: { name: row.name } });
  });
}
