import { sql } from 'kysely';
import type { Executor } from '../db/database';

/**
 * The seats the plan limit `seats` counts, the same number wherever it is enforced or shown:
 * active members holding at least one `billable` role (a suspended member takes no seat, as
 * the contract's `billable_seats` says), and pending, unexpired invites that would grant one, so that invitations cannot be
 * accepted past the limit. Billing's quantity leaves the invites out (`invites: false`).
 * `exceptUserId` / `exceptInviteId` leave out the one being changed.
 */
export async function seatsInUse(
  db: Executor,
  orgId: string,
  options: { now?: Date; exceptUserId?: string | null; exceptInviteId?: string | null; invites?: boolean } = {},
): Promise<number> {
  const { now = new Date(), exceptUserId = null, exceptInviteId = null, invites = true } = options;
  const members = db
    .selectFrom('memberships as m')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('m.org_id', '=', orgId)
    .where('m.status', '=', 'active')
    .$if(exceptUserId !== null, (q) => q.where('m.user_id', '!=', exceptUserId as string))
    .where((eb) =>
      eb.exists(
        eb
          .selectFrom('role_assignments as ra')
          .innerJoin('roles as r', 'r.id', 'ra.role_id')
          .select(sql.lit(1).as('one'))
          .whereRef('ra.org_id', '=', 'm.org_id')
          .whereRef('ra.user_id', '=', 'm.user_id')
          .where('r.seat_class', '=', 'billable'),
      ),
    )
    .executeTakeFirstOrThrow();
  const pending = !invites
    ? Promise.resolve({ n: '0' })
    : db
        .selectFrom('invites as i')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('i.org_id', '=', orgId)
        .where('i.status', '=', 'pending')
        .where('i.expires_at', '>', now)
        .$if(exceptInviteId !== null, (q) => q.where('i.id', '!=', exceptInviteId as string))
        .where((eb) =>
          eb.exists(
            eb
              .selectFrom('invite_roles as ir')
              .innerJoin('roles as r', 'r.id', 'ir.role_id')
              .select(sql.lit(1).as('one'))
              .whereRef('ir.invite_id', '=', 'i.id')
              .where('r.seat_class', '=', 'billable'),
          ),
        )
        .executeTakeFirstOrThrow();
  const [m, p] = await Promise.all([members, pending]);
  return Number(m.n) + Number(p.n);
}
