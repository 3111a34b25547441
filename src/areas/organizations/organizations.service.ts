import type { Transaction } from 'kysely';
import type { components } from '../../../generated/openapi';
import type { Database, MembershipVia } from '../../db/schema';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, isUniqueViolation, notFound, validationError } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { storageOf } from '../../lib/storage';
import { SYSTEM_ROLES } from '../../identity/permissions';
import { steppedUp } from '../../identity/sessions';
import { addMember, holdsOwner } from '../members';
import { subscriptionInForce } from './organizations.billing';
import { toOrganization } from './organizations.mapper';
import * as repo from './organizations.repo';

export interface NewOrganization {
  orgId: string;
  ownerRoleId: string;
  roleIds: Record<string, string>;
}

/** A URL-safe slug from a name, made unique with a short suffix when taken. */
export async function availableSlug(db: Transaction<Database>, name: string): Promise<string> {
  // Accents go (é → e) rather than becoming a hyphen; cut to length before trimming, so the slug never ends in `-`.
  const base =
    name
      .toLowerCase()
      .normalize('NFKD')
      .replace(/[\u0300-\u036f]/g, '')
      .replace(/[^a-z0-9]+/g, '-')
      .slice(0, 48)
      .replace(/^-+|-+$/g, '') || 'org';
  for (let attempt = 0; ; attempt += 1) {
    const slug = attempt === 0 ? base : `${base}-${Math.random().toString(36).slice(2, 8)}`;
    const taken = await db.selectFrom('organizations').select('id').where('slug', '=', slug).executeTakeFirst();
    if (!taken) return slug;
  }
}

/**
 * An organization with its system roles and its first member holding Owner. Runs inside the
 * caller's transaction so that an organization never exists without an owner.
 */
export async function createOrganizationWithOwner(
  db: Transaction<Database>,
  input: { name: string; slug?: string; ownerUserId: string; via?: MembershipVia },
): Promise<NewOrganization> {
  const orgId = newId('organization');
  const slug = input.slug ?? (await availableSlug(db, input.name));
  await db.insertInto('organizations').values({ id: orgId, name: input.name, slug }).execute();
  const roleIds: Record<string, string> = {};
  await db
    .insertInto('roles')
    .values(
      SYSTEM_ROLES.map((role) => {
        const id = newId('role');
        roleIds[role.key] = id;
        return {
          // A system role's permissions are read from the catalog by system_key, not stored.
          id,
          org_id: orgId,
          name: role.name,
          description: role.description,
          permissions: [],
          is_system: true,
          system_key: role.key,
          seat_class: role.seatClass,
        };
      }),
    )
    .execute();
  const ownerRoleId = roleIds.owner as string;
  await addMember(db, { orgId, userId: input.ownerUserId, via: input.via ?? 'creator', roleIds: [ownerRoleId] });
  return { orgId, ownerRoleId, roleIds };
}

// ---------------------------------------------------------------------------------------
// The Organizations operations: list, create, read, change and delete an organization.
// ---------------------------------------------------------------------------------------

type Organization = components['schemas']['Organization'];
type OrganizationCreate = components['schemas']['OrganizationCreate'];
type OrganizationUpdate = components['schemas']['OrganizationUpdate'];

const slugTaken = (slug: string) => new ApiError('slug_taken', `The slug "${slug}" is used by another organization; choose another.`);

/** `{id}` must be the organization of X-Organization-Id; any other is 404, whether or not it exists. */
export function checkSameOrganization(ctx: RequestContext, id: string): void {
  if (id !== ctx.orgId) throw new ApiError('not_found', `No organization ${id} here; {id} must be the organization named in X-Organization-Id.`);
}

export async function listOrganizations(ctx: RequestContext, page: PageRequest): Promise<Page<Organization>> {
  const caller = ctx.authenticated;
  if (caller.kind === 'session') {
    return toPage(await repo.listMemberOrganizations(ctx.db, caller.userId, page), page, toOrganization);
  }
  // A credential bound to one organization acts only there: the page holds that one.
  const orgId = 'orgId' in caller ? caller.orgId : null;
  const org = orgId && (page.after === undefined || orgId > page.after) ? await repo.findOrganization(ctx.db, orgId) : undefined;
  return { data: org ? [toOrganization(org)] : [], next_cursor: null };
}

export async function getOrganization(ctx: RequestContext, id: string): Promise<Organization> {
  checkSameOrganization(ctx, id);
  const org = await repo.findOrganization(ctx.db, id);
  if (!org) throw notFound('organization', id);
  return toOrganization(org);
}

export async function createOrganization(ctx: RequestContext, body: OrganizationCreate): Promise<Organization> {
  const userId = ctx.user;
  const run = () =>
    ctx.write(async (w) => {
      const created = await createOrganizationWithOwner(w.db, { name: body.name, slug: body.slug, ownerUserId: userId });
      // The entry belongs to the new organization, whose first Owner the caller now is.
      ctx.actIn({ orgId: created.orgId, requireMfa: false, permissions: new Set(SYSTEM_ROLES.find((r) => r.key === 'owner')?.permissions ?? []) });
      const org = await repo.findOrganization(w.db, created.orgId);
      w.audit({ targetId: created.orgId, changes: { name: body.name, slug: org?.slug } });
      return toOrganization(org!);
    });
  // A slug made from the name is retried with a suffix when a concurrent request takes it first.
  return conflictOnUnique(
    repo.SLUG_CONSTRAINT,
    () => slugTaken(body.slug ?? body.name),
    body.slug !== undefined
      ? run
      : () =>
          run().catch((err) => {
            if (isUniqueViolation(err, repo.SLUG_CONSTRAINT)) return run();
            throw err;
          }),
  );
}

export async function updateOrganization(ctx: RequestContext, id: string, body: OrganizationUpdate): Promise<Organization> {
  checkSameOrganization(ctx, id);
  const caller = ctx.authenticated;
  const run = () =>
    ctx.write(async (w) => {
      const org = await repo.findOrganization(w.db, id, true);
      if (!org) throw notFound('organization', id);
      const changes: { name?: string; slug?: string; require_mfa?: boolean } = {};
      if (body.name !== undefined && body.name !== org.name) changes.name = body.name;
      if (body.slug !== undefined && body.slug !== org.slug) changes.slug = body.slug;
      if (body.require_mfa !== undefined && body.require_mfa !== org.require_mfa) {
        if (caller.kind !== 'session')
          throw new ApiError('requires_person', 'Only a person signed in to the web app may change the second-factor requirement; API tokens cannot.');
        if (!steppedUp(caller)) {
          throw new ApiError(
            'step_up_required',
            'Changing the second-factor requirement needs a step-up within the last 5 minutes; verify a second factor (/auth/step-up/*) and retry.',
          );
        }
        changes.require_mfa = body.require_mfa;
      }
      const row = Object.keys(changes).length > 0 ? await repo.updateOrganization(w.db, id, changes) : org;
      w.audit({ targetId: id, changes: changedMembers(org, changes) });
      return toOrganization(row!);
    });
  return body.slug === undefined ? run() : conflictOnUnique(repo.SLUG_CONSTRAINT, () => slugTaken(body.slug as string), run);
}

/**
 * Deletes the organization for good, in one transaction: the Owner only, the slug repeated
 * in `confirm`, no paid subscription in force (read from the payment provider first). Its
 * tokens, sessions' standing and MCP servers stop at once: the deletions notify every
 * server's credential cache when they commit. The logo's bytes go after the commit.
 */
export async function deleteOrganization(ctx: RequestContext, id: string, confirm: string): Promise<void> {
  checkSameOrganization(ctx, id);
  const org = await repo.findOrganization(ctx.db, id);
  if (!org) throw notFound('organization', id);
  if (!(await holdsOwner(ctx.db, id, ctx.user))) {
    throw new ApiError('missing_permission', 'Only an Owner of the organization may delete it.');
  }
  if (confirm !== org.slug) {
    throw validationError([{ in: 'query', pointer: '/confirm', message: `must repeat the organization's slug (${org.slug})` }]);
  }
  if (await subscriptionInForce(ctx, id)) {
    throw new ApiError(
      'subscription_active',
      'This organization has a paid subscription in force; cancel it in the customer portal (POST /organization/{id}/billing/portal) first.',
    );
  }
  const logoKey = await ctx.write(async (w) => {
    const current = await repo.findOrganization(w.db, id, true);
    if (!current || current.slug !== confirm) throw notFound('organization', id);
    await repo.deleteOrganizationEverywhere(w.db, id);
    w.audit({ targetId: id, changes: { name: current.name, slug: current.slug } });
    return current.logo_key;
  });
  ctx.log.info({ organization_id: id, slug: org.slug, deleted_by: ctx.user }, 'organization deleted');
  if (logoKey)
    await storageOf(ctx.deps.config)
      .delete(logoKey)
      .catch((err) => ctx.log.warn({ err }, 'logo of a deleted organization not removed'));
}
