// `updated_at` is kept by one trigger (touch_updated_at), not by each repository: it moves
// when an update changes the row, and not for bookkeeping columns or an update that changes
// nothing.
import { sql } from 'kysely';
import type { DatabaseHandle } from '../../src/db/database';
import { newId } from '../../src/lib/ids';
import { freshDatabase } from '../support/database';
import { Factories } from '../support/factories';

let database: DatabaseHandle;
let factories: Factories;
beforeAll(async () => {
  database = await freshDatabase();
  factories = new Factories(database.db);
});
afterAll(() => database.close());

it('is kept by the trigger on every table that has the column', async () => {
  const { rows } = await sql<{ table: string; trigger: string | null }>`
    select c.table_name as table, t.tgname as trigger
    from information_schema.columns c
    left join pg_trigger t on t.tgrelid = (quote_ident(c.table_name))::regclass and t.tgname = c.table_name || '_touch_updated_at'
    where c.table_schema = 'public' and c.column_name = 'updated_at'
    order by 1`.execute(database.db);
  expect(rows.length).toBeGreaterThan(5);
  expect(rows.filter((r) => !r.trigger).map((r) => r.table)).toEqual([]);
});

describe('on a notification destination', () => {
  const read = (id: string) =>
    database.db.selectFrom('notification_destinations').select(['name', 'updated_at']).where('id', '=', id).executeTakeFirstOrThrow();
  let id: string;
  let created: Date;

  beforeAll(async () => {
    const { orgId } = await factories.org();
    id = newId('notificationDestination');
    await database.db
      .insertInto('notification_destinations')
      .values({
        id,
        org_id: orgId,
        name: 'Ops',
        type: 'email',
        config: JSON.stringify({ to: ['a@b.example'], cc: [], bcc: [], subject_prefix: null }),
        event_types: [],
        is_active: true,
      })
      .execute();
    created = (await read(id)).updated_at;
  });

  it('does not move for an update that changes nothing, or only the test bookkeeping', async () => {
    await database.db.updateTable('notification_destinations').set({ name: 'Ops' }).where('id', '=', id).execute();
    await database.db.updateTable('notification_destinations').set({ last_test_at: new Date(), last_test_status: 'ok' }).where('id', '=', id).execute();
    expect((await read(id)).updated_at).toEqual(created);
  });

  it('moves when a setting changes, and keeps a value the update sets itself', async () => {
    await database.db.updateTable('notification_destinations').set({ name: 'Operations' }).where('id', '=', id).execute();
    const renamed = await read(id);
    expect(renamed.updated_at.getTime()).toBeGreaterThan(created.getTime());
    const explicit = new Date('2030-01-01T00:00:00.000Z');
    await database.db.updateTable('notification_destinations').set({ name: 'Ops again', updated_at: explicit }).where('id', '=', id).execute();
    expect((await read(id)).updated_at).toEqual(explicit);
  });
});

// Tables no API operation edits (people change their own name through sign-in providers, the
// operator writes settings, billing follows the payment provider): changed here directly. Their
// triggers name no bookkeeping columns, so updated_at did not move before the function took a
// missing argument list as empty; the tables an operation edits are covered through the API in
// test/integration/updated-at.test.ts.
describe.each([
  {
    table: 'users',
    make: async () => ({ id: await factories.user() }),
    change: (id: string) => sql`update users set name = 'Renamed' where id = ${id}`,
  },
  {
    table: 'settings',
    make: async () => {
      const key = `test.${newId('team')}`;
      await sql`insert into settings (key, value) values (${key}, '1'::jsonb)`.execute(database.db);
      return { key };
    },
    change: (key: string) => sql`update settings set value = '2'::jsonb where key = ${key}`,
  },
  {
    table: 'organization_billing',
    make: async () => {
      const { orgId } = await factories.org();
      await sql`insert into organization_billing (org_id, customer_id) values (${orgId}, ${`cus_${orgId}`})`.execute(database.db);
      return { org_id: orgId };
    },
    change: (orgId: string) => sql`update organization_billing set status = 'active' where org_id = ${orgId}`,
  },
])('on $table', ({ table, make, change }) => {
  it('moves when a column changes', async () => {
    const where = await make();
    const [column, value] = Object.entries(where)[0]!;
    const read = async () =>
      (
        await sql<{
          at: string;
        }>`select (extract(epoch from updated_at) * 1000000)::bigint::text as at from ${sql.table(table)} where ${sql.ref(column)} = ${value}`.execute(
          database.db,
        )
      ).rows[0]!.at;
    const before = BigInt(await read());
    await change(value).execute(database.db);
    expect(BigInt(await read()) > before).toBe(true);
  });
});
