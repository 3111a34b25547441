import type { Transaction } from 'kysely';
import type { Database, MembershipVia } from '../../db/schema';
import { newId } from '../../lib/ids';
import { SYSTEM_ROLES } from '../../auth/permissions';
import { addMember } from '../members/members.repo';

export interface NewOrganization {
  orgId: string;
  ownerRoleId: string;
  roleIds: Record<string, string>;
}

/** A URL-safe slug from a name, made unique with a short suffix when taken. */
export async function availableSlug(db: Transaction<Database>, name: string): Promise<string> {
  const base = name.toLowerCase().normalize('NFKD').replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 48) || 'org';
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
          id, org_id: orgId, name: role.name, description: role.description, permissions: [],
          is_system: true, system_key: role.key, seat_class: role.seatClass,
        };
      }),
    )
    .execute();
  const ownerRoleId = roleIds.owner as string;
  await addMember(db, { orgId, userId: input.ownerUserId, via: input.via ?? 'creator', roleIds: [ownerRoleId] });
  return { orgId, ownerRoleId, roleIds };
}
