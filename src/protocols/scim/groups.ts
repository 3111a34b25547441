// /scim/v2/Groups: the groups the identity provider keeps in the organization, of people who
// are its members. Group mappings (src/areas/group-mappings) turn membership into roles and teams.
import { sql } from 'kysely';
import { reconcileMappedGrants } from '../../areas/group-mappings';
import type { Executor } from '../../db/database';
import type { RequestContext, WriteScope } from '../../http/context';
import { isUniqueViolation } from '../../http/errors';
import { newId } from '../../lib/ids';
import { conditionsOf, type Condition } from './filter';
import { applyPatch, type Resource } from './patch';
import { checkIfMatch, GROUP_SCHEMA, invalidValue, listResponse, notFound, pageOf, project, ScimError, versionOf } from './wire';

const FILTERABLE = ['displayname', 'externalid', 'id', 'members.value'] as const;
const ATTRIBUTES = ['displayName', 'externalId', 'members'] as const;
const MULTI = new Set(['members']);
const NAME_KEY = 'scim_groups_org_id_display_name_key';
const EXTERNAL_ID_KEY = 'scim_groups_org_id_external_id_key';

interface GroupState {
  displayName: string;
  externalId?: string;
  /** User ids, in the order they were added. */
  members: string[];
}

function groupsQuery(db: Executor, orgId: string) {
  return db.selectFrom('scim_groups as g').select(['g.id', 'g.display_name', 'g.external_id', 'g.created_at', 'g.updated_at']).where('g.org_id', '=', orgId);
}
type GroupRow = Awaited<ReturnType<ReturnType<typeof groupsQuery>['executeTakeFirstOrThrow']>>;

function where(query: ReturnType<typeof groupsQuery>, conditions: Condition[]) {
  let q = query;
  for (const { attr, value } of conditions) {
    const v = value as string;
    if (attr === 'id') q = q.where('g.id', '=', v);
    else if (attr === 'externalid') q = q.where('g.external_id', '=', v);
    else if (attr === 'displayname') q = q.where(sql<string>`lower(g.display_name)`, '=', v.toLowerCase());
    else
      q = q.where((eb) =>
        eb.exists(eb.selectFrom('scim_group_members as gm').select('gm.user_id').whereRef('gm.group_id', '=', 'g.id').where('gm.user_id', '=', v)),
      );
  }
  return q;
}

type Member = { value: string; display: string; type: 'User' };

async function membersOf(db: Executor, orgId: string, groupIds: string[]): Promise<Map<string, Member[]>> {
  const out = new Map<string, Member[]>(groupIds.map((id) => [id, []]));
  if (groupIds.length === 0) return out;
  const rows = await db
    .selectFrom('scim_group_members as gm')
    .innerJoin('memberships as m', (join) => join.onRef('m.org_id', '=', 'gm.org_id').onRef('m.user_id', '=', 'gm.user_id'))
    .innerJoin('users as u', 'u.id', 'gm.user_id')
    .select(['gm.group_id', 'gm.user_id', 'u.email', 'u.name', sql<string | null>`m.scim_profile->>'displayName'`.as('display_name')])
    .where('gm.org_id', '=', orgId)
    .where('gm.group_id', 'in', groupIds)
    .orderBy('gm.created_at')
    .orderBy('gm.user_id')
    .execute();
  for (const row of rows) out.get(row.group_id)?.push({ value: row.user_id, display: row.display_name ?? row.name ?? row.email, type: 'User' });
  return out;
}

export type ScimGroup = Resource & { id: string; meta: { version: string; location: string } };

function toGroup(ctx: RequestContext, row: GroupRow, members: Member[]): ScimGroup {
  const body: Resource = {
    schemas: [GROUP_SCHEMA],
    id: row.id,
    ...(row.external_id !== null ? { externalId: row.external_id } : {}),
    displayName: row.display_name,
    members,
  };
  const meta = {
    resourceType: 'Group',
    created: row.created_at.toISOString(),
    lastModified: row.updated_at.toISOString(),
    location: `${ctx.deps.config.baseUrl}/scim/v2/Groups/${row.id}`,
    version: versionOf(body),
  };
  return { ...body, id: row.id, meta };
}

async function loadGroup(ctx: RequestContext, db: Executor, id: string, lock = false): Promise<{ row: GroupRow; group: ScimGroup; members: Member[] }> {
  const row = await groupsQuery(db, ctx.orgId)
    .where('g.id', '=', id)
    .$if(lock, (q) => q.forUpdate())
    .executeTakeFirst();
  if (!row) throw notFound('Group', id);
  const members = (await membersOf(db, ctx.orgId, [id])).get(id) ?? [];
  return { row, group: toGroup(ctx, row, members), members };
}

export async function list(
  ctx: RequestContext,
  query: { filter?: string; startIndex?: number; count?: number; attributes?: string; excludedAttributes?: string },
) {
  const conditions = conditionsOf(query.filter, FILTERABLE);
  const { startIndex, count } = pageOf(query);
  const filtered = where(groupsQuery(ctx.db, ctx.orgId), conditions);
  const total = await ctx.db
    .selectFrom(filtered.as('f'))
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  const rows =
    count === 0
      ? []
      : await filtered
          .orderBy('g.id')
          .offset(startIndex - 1)
          .limit(count)
          .execute();
  const members = await membersOf(
    ctx.db,
    ctx.orgId,
    rows.map((r) => r.id),
  );
  return listResponse(
    Number(total.n),
    startIndex,
    rows.map((row) => project(toGroup(ctx, row, members.get(row.id) ?? []), query.attributes, query.excludedAttributes)),
  );
}

export async function get(ctx: RequestContext, id: string, query: { attributes?: string; excludedAttributes?: string }) {
  const { group } = await loadGroup(ctx, ctx.db, id);
  return { group: project(group, query.attributes, query.excludedAttributes), version: group.meta.version };
}

/** The user ids of a `members` value; each must be a person of the organization (not removed). */
function memberIds(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw invalidValue('members must be an array.');
  const ids: string[] = [];
  for (const item of value) {
    const v = (item as Resource | null)?.value;
    const type = (item as Resource | null)?.type;
    if (typeof v !== 'string') throw invalidValue('Each member needs a value, the person’s id.');
    if (type !== undefined && type !== 'User') throw invalidValue('Only people (type User) can be members; groups do not nest.');
    if (!ids.includes(v)) ids.push(v);
  }
  return ids;
}

function stateFromBody(body: Resource): GroupState {
  return {
    displayName: body.displayName as string,
    ...(typeof body.externalId === 'string' ? { externalId: body.externalId } : {}),
    members: memberIds(body.members),
  };
}

function checkState(state: Resource): GroupState {
  const { displayName, externalId, members } = state;
  if (typeof displayName !== 'string' || displayName.length < 1 || displayName.length > 200)
    throw invalidValue('displayName must be a string of 1 to 200 characters.');
  if (externalId !== undefined && (typeof externalId !== 'string' || externalId.length > 255))
    throw invalidValue('externalId must be a string of at most 255 characters.');
  return { displayName, ...(externalId !== undefined ? { externalId } : {}), members: memberIds(members) };
}

async function requireMembers(db: Executor, orgId: string, ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  const found = await db
    .selectFrom('memberships')
    .select('user_id')
    .where('org_id', '=', orgId)
    .where('user_id', 'in', ids)
    .where('status', '!=', 'removed')
    .execute();
  const known = new Set(found.map((r) => r.user_id));
  const unknown = ids.filter((id) => !known.has(id));
  if (unknown.length > 0) throw invalidValue(`Not people of this organization: ${unknown.slice(0, 5).join(', ')}${unknown.length > 5 ? ', …' : ''}.`);
}

const uniqueness = (err: unknown, state: GroupState): never => {
  if (isUniqueViolation(err, NAME_KEY)) throw new ScimError(409, `A group named ${state.displayName} already exists in this organization.`, 'uniqueness');
  if (isUniqueViolation(err, EXTERNAL_ID_KEY))
    throw new ScimError(409, `A group with externalId ${state.externalId} already exists in this organization.`, 'uniqueness');
  throw err;
};

/** Makes the stored membership of a group exactly `ids`; answers who joined and who left. */
async function syncMembers(w: WriteScope, orgId: string, groupId: string, ids: string[]): Promise<{ added: string[]; removed: string[] }> {
  const current = (await w.db.selectFrom('scim_group_members').select('user_id').where('group_id', '=', groupId).execute()).map((r) => r.user_id);
  const removed = current.filter((id) => !ids.includes(id));
  const added = ids.filter((id) => !current.includes(id));
  if (removed.length > 0) await w.db.deleteFrom('scim_group_members').where('group_id', '=', groupId).where('user_id', 'in', removed).execute();
  // One row at a time keeps created_at, and so the member order, the order they were sent in.
  for (const userId of added) await w.db.insertInto('scim_group_members').values({ group_id: groupId, org_id: orgId, user_id: userId }).execute();
  return { added, removed };
}

export async function create(ctx: RequestContext, body: Resource): Promise<ScimGroup> {
  const state = stateFromBody(body);
  const orgId = ctx.orgId;
  const id = newId('scimGroup');
  await ctx.write(async (w) => {
    await requireMembers(w.db, orgId, state.members);
    await w.db
      .insertInto('scim_groups')
      .values({ id, org_id: orgId, display_name: state.displayName, external_id: state.externalId ?? null })
      .execute()
      .catch((err) => uniqueness(err, state));
    await syncMembers(w, orgId, id, state.members);
    // A new group has no mappings yet: nothing to grant.
    w.audit({ targetId: id, changes: { display_name: state.displayName, external_id: state.externalId ?? null, members_added: state.members.length } });
  });
  return (await loadGroup(ctx, ctx.db, id)).group;
}

async function update(ctx: RequestContext, id: string, ifMatch: string | undefined, next: (current: GroupState) => GroupState): Promise<ScimGroup> {
  const orgId = ctx.orgId;
  await ctx.write(async (w) => {
    const { row, group, members } = await loadGroup(ctx, w.db, id, true);
    checkIfMatch(ifMatch, group.meta.version);
    const before: GroupState = {
      displayName: row.display_name,
      ...(row.external_id !== null ? { externalId: row.external_id } : {}),
      members: members.map((m) => m.value),
    };
    const after = next(before);
    await requireMembers(
      w.db,
      orgId,
      after.members.filter((m) => !before.members.includes(m)),
    );
    if (after.displayName !== before.displayName || after.externalId !== before.externalId) {
      await w.db
        .updateTable('scim_groups')
        .set({ display_name: after.displayName, external_id: after.externalId ?? null })
        .where('id', '=', id)
        .execute()
        .catch((err) => uniqueness(err, after));
    }
    const { added, removed } = await syncMembers(w, orgId, id, after.members);
    await reconcileMappedGrants(w, ctx.deps.hooks, orgId, [...added, ...removed]);
    // The group's version covers its members: a change of membership is a change of the group.
    if (added.length > 0 || removed.length > 0) await w.db.updateTable('scim_groups').set({ updated_at: new Date() }).where('id', '=', id).execute();
    const changes: Record<string, unknown> = { members_added: added, members_removed: removed };
    if (after.displayName !== before.displayName) changes.display_name = { from: before.displayName, to: after.displayName };
    if (after.externalId !== before.externalId) changes.external_id = { from: before.externalId ?? null, to: after.externalId ?? null };
    w.audit({ targetId: id, changes });
  });
  return (await loadGroup(ctx, ctx.db, id)).group;
}

export function replace(ctx: RequestContext, id: string, ifMatch: string | undefined, body: Resource): Promise<ScimGroup> {
  if (typeof body.id === 'string' && body.id !== id) throw new ScimError(400, 'id cannot change; leave it out or send the group’s own.', 'mutability');
  const state = stateFromBody(body);
  return update(ctx, id, ifMatch, () => state);
}

export function patch(ctx: RequestContext, id: string, ifMatch: string | undefined, body: unknown): Promise<ScimGroup> {
  return update(ctx, id, ifMatch, (current) => {
    const resource: Resource = { ...current, members: current.members.map((value) => ({ value })) };
    return checkState(applyPatch(resource, body, ATTRIBUTES, MULTI));
  });
}

export async function remove(ctx: RequestContext, id: string, ifMatch: string | undefined): Promise<void> {
  await ctx.write(async (w) => {
    const { row, group, members } = await loadGroup(ctx, w.db, id, true);
    checkIfMatch(ifMatch, group.meta.version);
    await w.db.deleteFrom('scim_groups').where('id', '=', id).execute();
    // Its mappings went with it (cascade): its members lose what only they gave.
    await reconcileMappedGrants(
      w,
      ctx.deps.hooks,
      ctx.orgId,
      members.map((m) => m.value),
    );
    w.audit({ targetId: id, changes: { display_name: row.display_name, members_removed: members.length } });
  });
}
