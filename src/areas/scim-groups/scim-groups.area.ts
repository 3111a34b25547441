import type { components } from '../../../generated/openapi';
import type { Executor } from '../../db/database';
import { defineArea } from '../../http/area';
import type { RequestContext } from '../../http/context';
import { ApiError, notFound } from '../../http/errors';
import { pageRequest, toPage } from '../../http/pagination';

type ScimGroup = components['schemas']['ScimGroup'];

const likePattern = (q: string) => `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

function groups(db: Executor, orgId: string) {
  return db
    .selectFrom('scim_groups as g')
    .select((eb) => [
      'g.id',
      'g.display_name',
      'g.external_id',
      'g.created_at',
      'g.updated_at',
      eb
        .selectFrom('scim_group_members as gm')
        .innerJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 'gm.org_id').onRef('m.user_id', '=', 'gm.user_id'))
        .select((inner) => inner.fn.countAll<string>().as('n'))
        .whereRef('gm.group_id', '=', 'g.id')
        .where('m.status', '!=', 'removed')
        .as('member_count'),
    ])
    .where('g.org_id', '=', orgId);
}
type Row = Awaited<ReturnType<ReturnType<typeof groups>['executeTakeFirstOrThrow']>>;

async function present(db: Executor, rows: Row[]): Promise<ScimGroup[]> {
  const ids = rows.map((r) => r.id);
  const mappings =
    ids.length === 0 ? [] : await db.selectFrom('group_mappings').select(['id', 'scim_group_id']).where('scim_group_id', 'in', ids).orderBy('id').execute();
  return rows.map((row) => ({
    id: row.id,
    display_name: row.display_name,
    external_id: row.external_id,
    member_count: Number(row.member_count ?? 0),
    mapping_ids: mappings.filter((m) => m.scim_group_id === row.id).map((m) => m.id),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  }));
}

async function requireMember(ctx: RequestContext, userId: string): Promise<void> {
  const member = await ctx.db.selectFrom('memberships').select('status').where('org_id', '=', ctx.orgId).where('user_id', '=', userId).executeTakeFirst();
  if (!member || member.status === 'removed') {
    throw new ApiError('unknown_reference', `${userId} is not a member of this organization.`, {
      errors: [{ in: 'query', pointer: '/user_id', message: 'is not a member of this organization' }],
    });
  }
}

/** The groups the identity provider pushed, read by administrators building group mappings; only SCIM changes them. */
export default defineArea({
  tag: 'SCIM groups',
  handlers: {
    async listScimGroups({ query }, ctx) {
      const page = pageRequest(query, 'scimGroup');
      if (query.user_id !== undefined) await requireMember(ctx, query.user_id);
      const rows = await groups(ctx.db, ctx.orgId)
        .$if(page.after !== undefined, (q) => q.where('g.id', '>', page.after as string))
        .$if(query.q !== undefined, (q) => q.where('g.display_name', 'ilike', likePattern(query.q as string)))
        .$if(query.user_id !== undefined, (q) =>
          q.where((eb) =>
            eb.exists(
              eb
                .selectFrom('scim_group_members as gm')
                .select('gm.user_id')
                .whereRef('gm.group_id', '=', 'g.id')
                .where('gm.user_id', '=', query.user_id as string),
            ),
          ),
        )
        .$if(query.mapped !== undefined, (q) =>
          q.where((eb) => {
            const mapped = eb.exists(eb.selectFrom('group_mappings as gmap').select('gmap.id').whereRef('gmap.scim_group_id', '=', 'g.id'));
            return query.mapped ? mapped : eb.not(mapped);
          }),
        )
        .orderBy('g.id')
        .limit(page.limit + 1)
        .execute();
      const data = await present(ctx.db, rows);
      return { status: 200, body: toPage(data, page, (g) => g) };
    },
    async getScimGroup({ params }, ctx) {
      const row = await groups(ctx.db, ctx.orgId).where('g.id', '=', params.id).executeTakeFirst();
      if (!row) throw notFound('SCIM group', params.id);
      return { status: 200, body: (await present(ctx.db, [row]))[0] as ScimGroup };
    },
  },
});
