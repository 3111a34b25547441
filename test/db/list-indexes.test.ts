// Lists page through an organization's rows by id: a table of organization-owned rows needs an
// index led by (org_id, id), or each page reads the whole organization (and sorts it) or walks
// the primary key through every other organization's rows. Runs on both databases (make test
// runs this folder on both).
import { sql } from 'kysely';
import { migrateToLatest, type DatabaseHandle } from '../../src/db/database';
import { emptyDatabase } from '../support/database';

/** Tables with `org_id` and `id` that are never paged through by organization and id alone, and why. */
const NOT_PAGED_BY_ORGANIZATION: Record<string, string> = {
  mcp_servers: 'listed per owner: (org_id, owner_user_id, id)',
  notification_deliveries: 'listed per destination: (destination_id, id)',
  outbox: 'read by availability, never listed',
  shares: 'listed per resource: (org_id, resource_type, resource_id, id)',
  tool_files: 'listed per owner or upload request: (org_id, owner_user_id, id), (upload_request_id, id)',
  upload_requests: 'listed per requester or assignee',
  user_toolboxes: 'listed per owner: (org_id, owner_user_id, id)',
};

let database: DatabaseHandle;
beforeAll(async () => {
  database = await emptyDatabase();
  await migrateToLatest(database.db);
});
afterAll(() => database.close());

it('gives every table of organization-owned rows paged by id an index led by (org_id, id)', async () => {
  const { rows } = await sql<{ name: string }>`
    select t.relname as name
    from pg_class t join pg_namespace n on n.oid = t.relnamespace
    where n.nspname = 'public' and t.relkind = 'r'
      and exists (select 1 from pg_attribute a where a.attrelid = t.oid and a.attname = 'org_id' and not a.attisdropped)
      and exists (select 1 from pg_attribute a where a.attrelid = t.oid and a.attname = 'id' and not a.attisdropped)
      and not exists (
        select 1 from pg_index i
        where i.indrelid = t.oid and i.indnatts >= 2 and i.indpred is null
          and (select attname from pg_attribute where attrelid = t.oid and attnum = i.indkey[0]) = 'org_id'
          and (select attname from pg_attribute where attrelid = t.oid and attnum = i.indkey[1]) = 'id')
    order by 1`.execute(database.db);
  expect(rows.map((r) => r.name)).toEqual(Object.keys(NOT_PAGED_BY_ORGANIZATION).sort());
});
