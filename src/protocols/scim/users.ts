// /scim/v2/Users: the organization's members as SCIM sees them. A SCIM user is a membership
// (its `external_id`, and the `scim_profile` the identity provider last sent), so that
// suspending and removing go through the same guards and hooks as the Members area.
import { sql } from 'kysely';
import { requireWithinLimit } from '../../access/entitlements';
import { seatsInUse } from '../../access/seats';
import { addMember, holdsOwner, lockOrganization, otherActiveOwners, setStatus, stripMembership } from '../../areas/members';
import { systemRoleId } from '../../areas/roles';
import type { Executor } from '../../db/database';
import type { RequestContext, WriteScope } from '../../http/context';
import { isUniqueViolation } from '../../http/errors';
import { createUser, findUserByEmail } from '../../identity/users';
import { revokeGrant } from '../oauth-server/grants';
import { conditionsOf, type Condition } from './filter';
import { applyPatch, type Resource } from './patch';
import { booleanOf, checkIfMatch, invalidValue, listResponse, notFound, pageOf, project, ScimError, USER_SCHEMA, versionOf } from './wire';

const FILTERABLE = ['username', 'emails.value', 'externalid', 'id', 'active'] as const;
const ATTRIBUTES = ['userName', 'externalId', 'name', 'displayName', 'emails', 'active'] as const;
const MULTI = new Set(['emails']);
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const EXTERNAL_ID_KEY = 'memberships_external_id_key';

/** What the identity provider says of a person, as PUT sends it and PATCH edits it. */
interface UserState {
  userName: string;
  externalId?: string;
  name?: Resource;
  displayName?: string;
  emails?: Resource[];
  active: boolean;
}

interface Profile {
  userName?: string;
  name?: Resource;
  displayName?: string;
  emails?: Resource[];
}

function usersQuery(db: Executor, orgId: string) {
  return db
    .selectFrom('memberships as m')
    .innerJoin('users as u', 'u.id', 'm.user_id')
    .select(['m.user_id', 'm.status', 'm.external_id', 'm.scim_profile', 'm.created_at', 'm.updated_at', 'u.email', 'u.name'])
    .where('m.org_id', '=', orgId)
    .where('m.status', '!=', 'removed');
}

type UserRow = Awaited<ReturnType<ReturnType<typeof usersQuery>['executeTakeFirstOrThrow']>>;

const userNameOf = sql<string>`lower(coalesce(m.scim_profile->>'userName', u.email))`;

function where(query: ReturnType<typeof usersQuery>, conditions: Condition[]) {
  let q = query;
  for (const { attr, value } of conditions) {
    if (attr === 'active') q = q.where('m.status', value === true ? '=' : '!=', 'active');
    else if (attr === 'id') q = q.where('m.user_id', '=', value as string);
    else if (attr === 'externalid') q = q.where('m.external_id', '=', value as string);
    else if (attr === 'username') q = q.where(userNameOf, '=', (value as string).toLowerCase());
    else {
      const wanted = (value as string).toLowerCase();
      q = q.where((eb) =>
        eb.or([
          eb(eb.fn('lower', ['u.email']), '=', wanted),
          eb.exists(
            eb
              .selectFrom(
                sql`jsonb_array_elements(case when jsonb_typeof(m.scim_profile->'emails') = 'array' then m.scim_profile->'emails' else '[]'::jsonb end)`.as(
                  'e',
                ),
              )
              .select(sql.lit(1).as('one'))
              .where(sql`lower(e.value->>'value')`, '=', wanted),
          ),
        ]),
      );
    }
  }
  return q;
}

async function groupsOf(db: Executor, orgId: string, userIds: string[]): Promise<Map<string, { value: string; display: string }[]>> {
  const out = new Map<string, { value: string; display: string }[]>(userIds.map((id) => [id, []]));
  if (userIds.length === 0) return out;
  const rows = await db
    .selectFrom('scim_group_members as gm')
    .innerJoin('scim_groups as g', 'g.id', 'gm.group_id')
    .select(['gm.user_id', 'g.id', 'g.display_name'])
    .where('gm.org_id', '=', orgId)
    .where('gm.user_id', 'in', userIds)
    .orderBy('g.id')
    .execute();
  for (const row of rows) out.get(row.user_id)?.push({ value: row.id, display: row.display_name });
  return out;
}

function stateOf(row: UserRow): UserState {
  const profile = (row.scim_profile ?? {}) as Profile;
  const displayName = profile.displayName ?? row.name ?? undefined;
  return {
    userName: profile.userName ?? row.email,
    ...(row.external_id !== null ? { externalId: row.external_id } : {}),
    ...(profile.name ? { name: profile.name } : {}),
    ...(displayName ? { displayName } : {}),
    emails: profile.emails ?? [{ value: row.email, type: 'work', primary: true }],
    active: row.status === 'active',
  };
}

export type ScimUser = Resource & { id: string; meta: { version: string; location: string } };

function toUser(ctx: RequestContext, row: UserRow, groups: { value: string; display: string }[]): ScimUser {
  const { userName, externalId, name, displayName, emails, active } = stateOf(row);
  const body: Resource = {
    schemas: [USER_SCHEMA],
    id: row.user_id,
    ...(externalId !== undefined ? { externalId } : {}),
    userName,
    ...(name ? { name } : {}),
    ...(displayName ? { displayName } : {}),
    ...(emails ? { emails } : {}),
    active,
    groups,
  };
  const meta = {
    resourceType: 'User',
    created: row.created_at.toISOString(),
    lastModified: row.updated_at.toISOString(),
    location: `${ctx.deps.config.baseUrl}/scim/v2/Users/${row.user_id}`,
    version: versionOf(body),
  };
  return { ...body, id: row.user_id, meta };
}

async function loadUser(ctx: RequestContext, db: Executor, userId: string, lock = false): Promise<{ row: UserRow; user: ScimUser }> {
  const row = await usersQuery(db, ctx.orgId)
    .where('m.user_id', '=', userId)
    .$if(lock, (q) => q.forUpdate('m'))
    .executeTakeFirst();
  if (!row) throw notFound('User', userId);
  const groups = (await groupsOf(db, ctx.orgId, [userId])).get(userId) ?? [];
  return { row, user: toUser(ctx, row, groups) };
}

export async function list(
  ctx: RequestContext,
  query: { filter?: string; startIndex?: number; count?: number; attributes?: string; excludedAttributes?: string },
) {
  const conditions = conditionsOf(query.filter, FILTERABLE);
  const { startIndex, count } = pageOf(query);
  const filtered = where(usersQuery(ctx.db, ctx.orgId), conditions);
  const total = await ctx.db
    .selectFrom(filtered.as('f'))
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  const rows =
    count === 0
      ? []
      : await filtered
          .orderBy('m.created_at')
          .orderBy('m.user_id')
          .offset(startIndex - 1)
          .limit(count)
          .execute();
  const groups = await groupsOf(
    ctx.db,
    ctx.orgId,
    rows.map((r) => r.user_id),
  );
  const resources = rows.map((row) => project(toUser(ctx, row, groups.get(row.user_id) ?? []), query.attributes, query.excludedAttributes));
  return listResponse(Number(total.n), startIndex, resources);
}

export async function get(ctx: RequestContext, id: string, query: { attributes?: string; excludedAttributes?: string }) {
  const { user } = await loadUser(ctx, ctx.db, id);
  return { user: project(user, query.attributes, query.excludedAttributes), version: user.meta.version };
}

/** The state a POST or PUT body describes; a missing `active` is true (RFC 7644 §3.5.1 leaves it to the service). */
function stateFromBody(body: Resource): UserState {
  const state: UserState = { userName: body.userName as string, active: body.active === undefined ? true : booleanOf(body.active, 'active') };
  if (typeof body.externalId === 'string') state.externalId = body.externalId;
  if (body.name && typeof body.name === 'object') state.name = body.name as Resource;
  if (typeof body.displayName === 'string') state.displayName = body.displayName;
  if (Array.isArray(body.emails)) state.emails = body.emails as Resource[];
  return state;
}

/** A state PATCH produced is checked as the schema checks a PUT body. */
function checkState(state: Resource): UserState {
  const { userName, externalId, name, displayName, emails, active } = state;
  if (typeof userName !== 'string' || userName.length < 3 || userName.length > 254) throw invalidValue('userName must be a string of 3 to 254 characters.');
  if (externalId !== undefined && (typeof externalId !== 'string' || externalId.length > 255))
    throw invalidValue('externalId must be a string of at most 255 characters.');
  if (name !== undefined && (typeof name !== 'object' || name === null || Array.isArray(name))) throw invalidValue('name must be an object.');
  if (displayName !== undefined && (typeof displayName !== 'string' || displayName.length > 200))
    throw invalidValue('displayName must be a string of at most 200 characters.');
  if (emails !== undefined) {
    if (!Array.isArray(emails) || emails.length > 20) throw invalidValue('emails must be an array of at most 20 addresses.');
    for (const email of emails) {
      const value = (email as Resource | null)?.value;
      if (typeof value !== 'string' || !EMAIL.test(value) || value.length > 254) throw invalidValue('Each of emails needs a value that is an email address.');
    }
  }
  return { ...(state as unknown as UserState), active: active === undefined ? true : booleanOf(active, 'active') };
}

/** The person's address in this service: the primary email, else userName when it is one, else the first email. */
function accountEmail(state: UserState): string {
  const primary = state.emails?.find((e) => e.primary === true || e.primary === 'True' || e.primary === 'true')?.value;
  const candidate =
    (typeof primary === 'string' ? primary : null) ??
    (EMAIL.test(state.userName) ? state.userName : ((state.emails?.[0]?.value as string | undefined) ?? null));
  if (!candidate || !EMAIL.test(candidate)) throw invalidValue('userName is not an email address and no primary email was given.');
  return candidate;
}

function profileOf(state: UserState): Profile {
  return {
    userName: state.userName,
    ...(state.name ? { name: state.name } : {}),
    ...(state.displayName !== undefined ? { displayName: state.displayName } : {}),
    ...(state.emails ? { emails: state.emails } : {}),
  };
}

async function requireUniqueUserName(db: Executor, orgId: string, userName: string, except: string | null): Promise<void> {
  const clash = await usersQuery(db, orgId)
    .where(userNameOf, '=', userName.toLowerCase())
    .where('m.scim_profile', 'is not', null)
    .$if(except !== null, (q) => q.where('m.user_id', '!=', except as string))
    .executeTakeFirst();
  if (clash) throw new ScimError(409, `A user with userName ${userName} is already provisioned in this organization (${clash.user_id}).`, 'uniqueness');
}

const eventMember = (row: { user_id: string; email: string; name: string | null }) => ({ user_id: row.user_id, email: row.email, name: row.name });

/**
 * Turns a membership off (suspended) or on again, as the identity provider says. Off means
 * it: beside the membership (which every credential of the person checks: sessions in this
 * organization, API tokens, MCP server tokens), the MCP OAuth grants of this organization are
 * revoked, so refresh tokens stop too. The last active Owner is never suspended.
 */
async function setActive(ctx: RequestContext, w: WriteScope, row: UserRow, active: boolean): Promise<Record<string, unknown>> {
  const orgId = ctx.orgId;
  if (active === (row.status === 'active')) return {};
  if (!active) {
    if ((await holdsOwner(w.db, orgId, row.user_id)) && (await otherActiveOwners(w.db, orgId, row.user_id)) === 0) {
      throw new ScimError(409, 'This person is the last active Owner of the organization; make someone else an Owner first.');
    }
    await setStatus(w.db, orgId, row.user_id, 'suspended', 'scim_deactivated');
    const revoked = await revokeGrants(w.db, orgId, row.user_id);
    w.emit('member.removed', { member: eventMember(row), status: 'suspended' });
    return { status: { from: row.status, to: 'suspended' }, oauth_grants_revoked: revoked };
  }
  await requireWithinLimit(w.db, orgId, 'seats', () => seatsInUse(w.db, orgId, { exceptUserId: row.user_id }));
  await setStatus(w.db, orgId, row.user_id, 'active', null);
  w.emit('member.joined', { member: eventMember(row), via: 'scim' });
  return { status: { from: row.status, to: 'active' } };
}

async function revokeGrants(db: Executor, orgId: string, userId: string): Promise<number> {
  const grants = await db
    .selectFrom('oauth_grants')
    .select('id')
    .where('org_id', '=', orgId)
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .execute();
  const now = new Date();
  for (const grant of grants) await revokeGrant(db, grant.id, now);
  return grants.length;
}

async function storeState(w: WriteScope, orgId: string, userId: string, state: UserState): Promise<void> {
  try {
    await w.db
      .updateTable('memberships')
      .set({ scim_profile: JSON.stringify(profileOf(state)), external_id: state.externalId ?? null, updated_at: new Date() })
      .where('org_id', '=', orgId)
      .where('user_id', '=', userId)
      .execute();
  } catch (err) {
    if (isUniqueViolation(err, EXTERNAL_ID_KEY))
      throw new ScimError(409, `Another user of this organization has externalId ${state.externalId}.`, 'uniqueness');
    throw err;
  }
}

/** Which of the state's attributes differ, by name, for the audit entry (never their values). */
function changedAttributes(before: UserState, after: UserState): string[] {
  return ATTRIBUTES.filter((a) => JSON.stringify(before[a] ?? null) !== JSON.stringify(after[a] ?? null));
}

export async function create(ctx: RequestContext, body: Resource): Promise<ScimUser> {
  const state = stateFromBody(body);
  const email = accountEmail(state);
  const orgId = ctx.orgId;
  const userId = await ctx.write(async (w) => {
    await lockOrganization(w.db, orgId);
    await requireUniqueUserName(w.db, orgId, state.userName, null);
    // The identity provider vouches for the organization's people: an account with this
    // address becomes the member. Sign-in through SSO still links by subject, never by email.
    const account = await findUserByEmail(w.db, email);
    const id = account?.id ?? (await createUser(w.db, { email, name: state.displayName ?? ((state.name?.formatted as string | undefined) || null) }));
    const membership = await w.db
      .selectFrom('memberships')
      .select(['status', 'scim_profile'])
      .where('org_id', '=', orgId)
      .where('user_id', '=', id)
      .forUpdate()
      .executeTakeFirst();
    if (membership && membership.status !== 'removed' && membership.scim_profile !== null) {
      throw new ScimError(409, `The person ${email} is already provisioned in this organization (${id}).`, 'uniqueness');
    }
    const becomesActive = state.active && membership?.status !== 'active';
    if (becomesActive) await requireWithinLimit(w.db, orgId, 'seats', () => seatsInUse(w.db, orgId, { exceptUserId: id }));
    const memberRole = await systemRoleId(w.db, orgId, 'member');
    const status = state.active ? 'active' : 'suspended';
    if (!membership) {
      await addMember(w.db, { orgId, userId: id, status, via: 'scim', roleIds: [memberRole] });
      if (!state.active) await setStatus(w.db, orgId, id, 'suspended', 'scim_deactivated');
    } else if (membership.status === 'removed') {
      // Provisioned again after a removal: a fresh membership, with the role a new one gets.
      await w.db
        .updateTable('memberships')
        .set({ status, status_reason: state.active ? null : 'scim_deactivated', via: 'scim', joined_at: new Date() })
        .where('org_id', '=', orgId)
        .where('user_id', '=', id)
        .execute();
      await w.db
        .insertInto('role_assignments')
        .values({ org_id: orgId, user_id: id, role_id: memberRole })
        .onConflict((oc) => oc.columns(['org_id', 'user_id', 'role_id']).doNothing())
        .execute();
    } else if (!state.active && membership.status === 'active') {
      // Taking over an existing member the identity provider says is inactive.
      const row = await usersQuery(w.db, orgId).where('m.user_id', '=', id).executeTakeFirstOrThrow();
      await setActive(ctx, w, row, false);
    } else if (state.active && membership.status === 'suspended') {
      const row = await usersQuery(w.db, orgId).where('m.user_id', '=', id).executeTakeFirstOrThrow();
      await setActive(ctx, w, row, true);
    }
    await storeState(w, orgId, id, state);
    w.audit({
      targetId: id,
      targetType: 'user',
      changes: {
        user_name: state.userName,
        external_id: state.externalId ?? null,
        active: state.active,
        taken_over: membership?.status === 'active' || membership?.status === 'suspended',
      },
    });
    if (becomesActive && membership?.status !== 'suspended')
      w.emit('member.joined', { member: { user_id: id, email: account?.email ?? email, name: account?.name ?? null }, via: 'scim' });
    return id;
  });
  return (await loadUser(ctx, ctx.db, userId)).user;
}

/** PUT and PATCH: the new state replaces the old, under If-Match, in one transaction. */
async function update(ctx: RequestContext, id: string, ifMatch: string | undefined, next: (current: UserState) => UserState): Promise<ScimUser> {
  const orgId = ctx.orgId;
  await ctx.write(async (w) => {
    await lockOrganization(w.db, orgId);
    const { row, user } = await loadUser(ctx, w.db, id, true);
    checkIfMatch(ifMatch, user.meta.version);
    const before = stateOf(row);
    const after = next(before);
    if (after.userName.toLowerCase() !== before.userName.toLowerCase()) await requireUniqueUserName(w.db, orgId, after.userName, id);
    const changes: Record<string, unknown> = { attributes: changedAttributes(before, after) };
    Object.assign(changes, await setActive(ctx, w, row, after.active));
    await storeState(w, orgId, id, after);
    w.audit({ targetId: id, targetType: 'user', changes });
  });
  return (await loadUser(ctx, ctx.db, id)).user;
}

export function replace(ctx: RequestContext, id: string, ifMatch: string | undefined, body: Resource): Promise<ScimUser> {
  if (typeof body.id === 'string' && body.id !== id) throw new ScimError(400, 'id cannot change; leave it out or send the user’s own.', 'mutability');
  const state = stateFromBody(body);
  accountEmail(state);
  return update(ctx, id, ifMatch, () => state);
}

export function patch(ctx: RequestContext, id: string, ifMatch: string | undefined, body: unknown): Promise<ScimUser> {
  return update(ctx, id, ifMatch, (current) => {
    const patched = checkState(applyPatch(current as unknown as Resource, body, ATTRIBUTES, MULTI));
    accountEmail(patched);
    return patched;
  });
}

/**
 * Deprovisions: the membership is removed as the Members area removes one (roles, shares and
 * API tokens go; the member-removed hooks disconnect connections and delete the person's
 * toolboxes and MCP servers), and the person leaves every SCIM group; the account remains.
 */
export async function remove(ctx: RequestContext, id: string, ifMatch: string | undefined): Promise<void> {
  const orgId = ctx.orgId;
  await ctx.write(async (w) => {
    await lockOrganization(w.db, orgId);
    const { row, user } = await loadUser(ctx, w.db, id, true);
    checkIfMatch(ifMatch, user.meta.version);
    if (row.status === 'active' && (await holdsOwner(w.db, orgId, id)) && (await otherActiveOwners(w.db, orgId, id)) === 0) {
      throw new ScimError(409, 'This person is the last active Owner of the organization; make someone else an Owner first.');
    }
    await setStatus(w.db, orgId, id, 'removed', 'scim_deprovisioned');
    const { revokedTokens } = await stripMembership(w.db, orgId, id, new Date());
    const revokedGrants = await revokeGrants(w.db, orgId, id);
    await w.db.deleteFrom('scim_group_members').where('org_id', '=', orgId).where('user_id', '=', id).execute();
    await w.db.updateTable('memberships').set({ external_id: null, scim_profile: null }).where('org_id', '=', orgId).where('user_id', '=', id).execute();
    await ctx.deps.hooks.run('memberRemoved', w, orgId, id);
    w.audit({
      targetId: id,
      targetType: 'user',
      changes: {
        status: { from: row.status, to: 'removed' },
        status_reason: 'scim_deprovisioned',
        api_tokens_revoked: revokedTokens,
        oauth_grants_revoked: revokedGrants,
      },
    });
    w.emit('member.removed', { member: eventMember(row), status: 'removed' });
  });
}
