import type { Executor } from '../db/database';
import { newId } from '../lib/ids';

/** People are found by email whatever its case. */
export function findUserByEmail(db: Executor, email: string) {
  return db
    .selectFrom('users')
    .select(['id', 'email', 'name'])
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .executeTakeFirst();
}

export async function createUser(db: Executor, input: { email: string; name?: string | null; isRootOrgStaff?: boolean }): Promise<string> {
  const id = newId('user');
  await db
    .insertInto('users')
    .values({ id, email: input.email, name: input.name ?? null, is_root_org_staff: input.isRootOrgStaff ?? false })
    .execute();
  return id;
}

export async function findOrCreateUser(db: Executor, email: string, name: string | null): Promise<string> {
  return (await findUserByEmail(db, email))?.id ?? createUser(db, { email, name });
}

/** The ids of the people whose address is at one of `domains` (lower case), as a subquery. */
export function usersAtDomains(db: Executor, domains: readonly string[]) {
  return db
    .selectFrom('users')
    .select('id')
    .where((x) => x.fn('lower', [x.fn('split_part', [x.ref('email'), x.val('@'), x.val(2)])]), 'in', [...domains]);
}
