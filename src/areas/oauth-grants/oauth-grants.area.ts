import type { Executor } from '../../db/database';
import { defineArea } from '../../http/area';
import type { RequestContext } from '../../http/context';
import { ApiError, notFound } from '../../http/errors';
import { filteredPageRequest, pageRequest, toFilteredPage, toPage } from '../../http/pagination';
import { loadMemberAccess } from '../../identity/credentials';
import { revokeGrant } from '../../protocols/oauth-server/grants';
import { holdsOwner } from '../members';

/**
 * Who gave which MCP client access to which MCP server (the grants of the OAuth server,
 * src/protocols/oauth-server): each person sees and withdraws their own; administrators see
 * and withdraw those in their organization. Withdrawing ends every token of the grant at once.
 */
function liveGrants(db: Executor, now = new Date()) {
  return db
    .selectFrom('oauth_grants as g')
    .innerJoin('oauth_clients as c', 'c.id', 'g.client_id')
    .select([
      'g.id',
      'g.org_id',
      'g.user_id',
      'g.mcp_server_id',
      'g.client_id',
      'g.scope',
      'g.created_at',
      'g.last_used_at',
      'g.expires_at',
      'c.kind',
      'c.metadata',
    ])
    .where('g.revoked_at', 'is', null)
    .where('g.expires_at', '>', now);
}

type GrantRow = Awaited<ReturnType<ReturnType<typeof liveGrants>['execute']>>[number];

function toGrant(row: GrantRow) {
  const metadata = row.metadata as { client_name?: string };
  return {
    id: row.id,
    user_id: row.user_id,
    mcp_server_id: row.mcp_server_id,
    client: { client_id: row.client_id, name: metadata.client_name ?? row.client_id, kind: row.kind as 'registered' | 'metadata_document' },
    scope: row.scope,
    created_at: row.created_at.toISOString(),
    last_used_at: row.last_used_at?.toISOString() ?? null,
    expires_at: row.expires_at.toISOString(),
  };
}

/** Withdraws the grant, with its audit entry in the grant's organization. */
async function withdraw(ctx: RequestContext, grant: GrantRow): Promise<void> {
  await ctx.write(async (w) => {
    if (!(await revokeGrant(w.db, grant.id))) throw notFound('OAuth grant', grant.id);
    w.audit({ targetId: grant.id, changes: { client_id: grant.client_id, mcp_server_id: grant.mcp_server_id, user_id: grant.user_id } });
  });
}

export default defineArea({
  tag: 'MCP OAuth',
  handlers: {
    async listMyOAuthGrants({ query }, ctx) {
      const page = pageRequest(query, 'oauthGrant');
      let select = liveGrants(ctx.db)
        .where('g.user_id', '=', ctx.person.userId)
        .orderBy('g.id', 'desc')
        .limit(page.limit + 1);
      if (page.after) select = select.where('g.id', '<', page.after);
      return { status: 200, body: toPage(await select.execute(), page, toGrant) };
    },
    async revokeMyOAuthGrant({ params }, ctx) {
      const person = ctx.person;
      const grant = await liveGrants(ctx.db).where('g.id', '=', params.grantId).where('g.user_id', '=', person.userId).executeTakeFirst();
      if (!grant) throw new ApiError('not_found', `No live OAuth grant ${params.grantId} of yours.`);
      // The entry belongs to the grant's organization, even once the person has left it (their
      // grant there is dead already, but withdrawing it is still theirs to do and to record).
      ctx.actIn((await loadMemberAccess(ctx.db, person.userId, grant.org_id)) ?? { orgId: grant.org_id, requireMfa: false, permissions: new Set() });
      await withdraw(ctx, grant);
      return { status: 204 };
    },
    async listOAuthGrants({ query }, ctx) {
      const filters = { user_id: query.user_id, mcp_server_id: query.mcp_server_id };
      const page = filteredPageRequest(query, 'oauthGrant', filters);
      let select = liveGrants(ctx.db)
        .where('g.org_id', '=', ctx.orgId)
        .orderBy('g.id', 'desc')
        .limit(page.limit + 1);
      if (query.user_id) select = select.where('g.user_id', '=', query.user_id);
      if (query.mcp_server_id) select = select.where('g.mcp_server_id', '=', query.mcp_server_id);
      if (page.after) select = select.where('g.id', '<', page.after);
      return { status: 200, body: toFilteredPage(await select.execute(), page, toGrant) };
    },
    async revokeOAuthGrant({ params }, ctx) {
      const grant = await liveGrants(ctx.db).where('g.id', '=', params.grantId).where('g.org_id', '=', ctx.orgId).executeTakeFirst();
      if (!grant) throw notFound('OAuth grant', params.grantId);
      // As for suspending them: only an Owner acts on an Owner's access.
      if (grant.user_id !== ctx.user && (await holdsOwner(ctx.db, ctx.orgId, grant.user_id)) && !(await holdsOwner(ctx.db, ctx.orgId, ctx.user))) {
        throw new ApiError('permission_escalation', 'Only an Owner may withdraw an Owner’s MCP client access.');
      }
      await withdraw(ctx, grant);
      return { status: 204 };
    },
  },
});
