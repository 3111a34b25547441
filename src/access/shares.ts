import { sql } from 'kysely';
import type { components } from '../../generated/openapi';
import type { Executor } from '../db/database';
import type { Row } from '../db/schema';
import { ApiError } from '../http/errors';
import type { Page } from '../http/pagination';
import { cursorAfter } from '../http/pagination';
import { newId } from '../lib/ids';

/**
 * Shares (access-control entries) of any resource kind: connectors now, templates, toolboxes
 * and files later. A share grants a user, every member of a team, or the whole organization
 * access to one resource at a level. Shares widen which resources a member reaches; what a
 * credential may do is still its permissions'.
 */
export type Share = components['schemas']['Share'];
export type ShareCreate = components['schemas']['ShareCreate'];
export type ShareResourceType = Share['resource_type'];
export type ShareRow = Row<'shares'>;

export function toShare(row: ShareRow): Share {
  return {
    id: row.id,
    resource_type: row.resource_type,
    resource_id: row.resource_id,
    principal: { type: row.principal_type, id: row.principal_id },
    level: row.level,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    created_by_user_id: row.created_by_user_id,
  };
}

/** A resource's shares, oldest first, a page at a time (`after`: the last share id of the previous page). */
export async function listShares(
  db: Executor,
  orgId: string,
  resourceType: ShareResourceType,
  resourceId: string,
  page: { limit: number; after: string | undefined },
): Promise<Page<Share>> {
  const rows = await db
    .selectFrom('shares')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('resource_type', '=', resourceType)
    .where('resource_id', '=', resourceId)
    .$if(page.after !== undefined, (q) => q.where('id', '>', page.after as string))
    .orderBy('id')
    .limit(page.limit + 1)
    .execute();
  const more = rows.length > page.limit;
  const shown = more ? rows.slice(0, page.limit) : rows;
  const last = shown[shown.length - 1];
  return { data: shown.map(toShare), next_cursor: more && last ? cursorAfter(last.id) : null };
}

/** 400 `unknown_reference` unless the principal is an active member, a team of the organization, or the organization. */
export async function checkPrincipal(db: Executor, orgId: string, principal: ShareCreate['principal'], pointer = '/principal/id'): Promise<void> {
  let found: boolean;
  switch (principal.type) {
    case 'user':
      found = !!(await db
        .selectFrom('memberships')
        .select('user_id')
        .where('org_id', '=', orgId)
        .where('user_id', '=', principal.id)
        .where('status', '=', 'active')
        .executeTakeFirst());
      break;
    case 'team':
      found = !!(await db.selectFrom('teams').select('id').where('org_id', '=', orgId).where('id', '=', principal.id).executeTakeFirst());
      break;
    case 'organization':
      found = principal.id === orgId;
      break;
  }
  if (!found) {
    const what = principal.type === 'user' ? 'an active member' : principal.type === 'team' ? 'a team' : 'the organization';
    throw new ApiError('unknown_reference', `${principal.id} is not ${what} of this organization.`, {
      errors: [{ in: 'body', pointer, message: `is not ${what} of this organization` }],
    });
  }
}

/**
 * Shares a resource with a principal, or changes the level of the principal's existing
 * share (`created: false`: answer 200 instead of 201). The principal is checked first.
 */
export async function shareResource(
  db: Executor,
  input: { orgId: string; resourceType: ShareResourceType; resourceId: string; share: ShareCreate; byUserId: string | null },
): Promise<{ share: Share; created: boolean; previousLevel: ShareCreate['level'] | null }> {
  await checkPrincipal(db, input.orgId, input.share.principal);
  const previous = await db
    .selectFrom('shares')
    .select('level')
    .where('org_id', '=', input.orgId)
    .where('resource_type', '=', input.resourceType)
    .where('resource_id', '=', input.resourceId)
    .where('principal_type', '=', input.share.principal.type)
    .where('principal_id', '=', input.share.principal.id)
    .executeTakeFirst();
  const row = await db
    .insertInto('shares')
    .values({
      id: newId('share'),
      org_id: input.orgId,
      resource_type: input.resourceType,
      resource_id: input.resourceId,
      principal_type: input.share.principal.type,
      principal_id: input.share.principal.id,
      level: input.share.level,
      created_by_user_id: input.byUserId,
    })
    .onConflict((oc) =>
      oc.columns(['org_id', 'resource_type', 'resource_id', 'principal_type', 'principal_id']).doUpdateSet({ level: (eb) => eb.ref('excluded.level') }),
    )
    .returningAll()
    .returning(sql<boolean>`xmax = 0`.as('inserted'))
    .executeTakeFirstOrThrow();
  const { inserted, ...share } = row;
  return { share: toShare(share), created: inserted, previousLevel: (previous?.level as ShareCreate['level'] | undefined) ?? null };
}

/** What a share's audit entry records: the share, whom it names, and its level before and after. */
export function shareAuditChanges(result: { share: Share; created: boolean; previousLevel: string | null }, body: ShareCreate): Record<string, unknown> {
  return { share_id: result.share.id, principal: body.principal, level: { from: result.previousLevel, to: body.level }, created: result.created };
}

/** Removes one share of the resource; undefined when there is no such share (of it). */
export function revokeShare(db: Executor, orgId: string, resourceType: ShareResourceType, resourceId: string, shareId: string): Promise<ShareRow | undefined> {
  return db
    .deleteFrom('shares')
    .where('org_id', '=', orgId)
    .where('resource_type', '=', resourceType)
    .where('resource_id', '=', resourceId)
    .where('id', '=', shareId)
    .returningAll()
    .executeTakeFirst();
}

/** Removes every share of a resource (it is being deleted). */
export async function deleteSharesOf(db: Executor, orgId: string, resourceType: ShareResourceType, resourceId: string): Promise<void> {
  await db.deleteFrom('shares').where('org_id', '=', orgId).where('resource_type', '=', resourceType).where('resource_id', '=', resourceId).execute();
}

/**
 * The ids of the resources of a kind shared with the user: directly, through a team they are
 * in, or with the whole organization. A query, to use as a subquery (`where id in (…)`).
 */
export function sharedWithQuery(db: Executor, orgId: string, userId: string, resourceType: ShareResourceType) {
  return db
    .selectFrom('shares as s')
    .select('s.resource_id')
    .where('s.org_id', '=', orgId)
    .where('s.resource_type', '=', resourceType)
    .where((eb) =>
      eb.or([
        eb.and([eb('s.principal_type', '=', 'user'), eb('s.principal_id', '=', userId)]),
        eb.and([eb('s.principal_type', '=', 'organization'), eb('s.principal_id', '=', orgId)]),
        eb.and([
          eb('s.principal_type', '=', 'team'),
          eb('s.principal_id', 'in', eb.selectFrom('team_members as tm').select('tm.team_id').where('tm.org_id', '=', orgId).where('tm.user_id', '=', userId)),
        ]),
      ]),
    );
}

/** The ids of the resources of a kind shared with the user (directly, through a team, or with the organization). */
export async function visibleThroughShares(db: Executor, orgId: string, userId: string, resourceType: ShareResourceType): Promise<string[]> {
  const rows = await sharedWithQuery(db, orgId, userId, resourceType).distinct().execute();
  return rows.map((r) => r.resource_id);
}

/** Whether one resource is shared with the user (directly, through a team, or with the organization). */
export async function isSharedWith(db: Executor, orgId: string, userId: string, resourceType: ShareResourceType, resourceId: string): Promise<boolean> {
  const row = await sharedWithQuery(db, orgId, userId, resourceType).where('s.resource_id', '=', resourceId).limit(1).executeTakeFirst();
  return !!row;
}
