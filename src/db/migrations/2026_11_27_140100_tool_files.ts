// Tool files, upload requests, and the bytes in storage that no row names any more.
// - upload_requests: one person asked by another for files; `status` moves from `open` to
//   one of the closed states once, and the staged files go with every state but
//   `confirmed`.
// - tool_files: one table for staged and stored files, because a staged file's id becomes
//   the tool file's id on confirmation and its bytes stay where they are: `state` is
//   `reserved` (a place, no bytes), `uploaded` (bytes checked, still staged) or `stored` (a
//   tool file). `size_bytes` of every row counts against the plan's file_storage_bytes, a
//   reservation by its declared size. `storage_key` names the bytes in storage (src/lib/storage.ts).
// - storage_sweeps: keys of bytes to delete from storage once `delete_after` passes. A
//   trigger adds the key of every tool_files row deleted (whatever deleted it: the API, an
//   expiry, an organization's deletion) and the previous key when bytes are replaced, in the
//   deleting transaction, so a key is never forgotten between the commit and the delete.
//   Before bytes are stored, the writer adds their key with a grace period and removes it in
//   the transaction that records them: bytes whose transaction never committed are swept.
import { type Kysely, sql } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('upload_requests')
    .addColumn('id', idColumn('upreq'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('requester_user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('assignee_user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('assignee_email', 'text', (c) => c.notNull())
    .addColumn('message', 'text')
    .addColumn('accepted_content_types', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn('max_file_bytes', 'bigint', (c) => c.notNull().check(sql`max_file_bytes > 0`))
    .addColumn('max_files', 'integer', (c) => c.notNull().check(sql`max_files between 1 and 100`))
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('open')
        .check(sql`status in ('open', 'confirmed', 'expired', 'cancelled', 'declined')`),
    )
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('confirmed_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await touchUpdatedAt(db, 'upload_requests');
  // The sweeper's search for open requests past their expiry.
  await sql`create index upload_requests_open_expiry on upload_requests (expires_at) where status = 'open'`.execute(db);
  await db.schema.createIndex('upload_requests_requester').on('upload_requests').columns(['org_id', 'requester_user_id']).execute();
  await db.schema.createIndex('upload_requests_assignee').on('upload_requests').columns(['org_id', 'assignee_user_id']).execute();

  await db.schema
    .createTable('tool_files')
    .addColumn('id', idColumn('file'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('owner_user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('content_type', 'text', (c) => c.notNull())
    .addColumn('size_bytes', 'bigint', (c) => c.notNull().check(sql`size_bytes >= 0`))
    .addColumn('sha256', 'text')
    .addColumn('storage_key', 'text', (c) => c.unique())
    .addColumn('source', 'text', (c) => c.notNull().check(sql`source in ('uploaded', 'upload_request', 'tool_output')`))
    // Set null, not cascade: a confirmed file outlives its request (deleted with a person who
    // was its assignee); a staged file left without one is removed by the sweeper.
    .addColumn('upload_request_id', reference, (c) => c.references('upload_requests.id').onDelete('set null'))
    .addColumn('state', 'text', (c) => c.notNull().check(sql`state in ('reserved', 'uploaded', 'stored')`))
    .addColumn('uploaded_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addCheckConstraint('tool_files_bytes_when_uploaded', sql`(state = 'reserved') = (storage_key is null and sha256 is null)`)
    .execute();
  await touchUpdatedAt(db, 'tool_files');
  await db.schema.createIndex('tool_files_org_owner').on('tool_files').columns(['org_id', 'owner_user_id', 'id']).execute();
  await db.schema.createIndex('tool_files_upload_request').on('tool_files').columns(['upload_request_id', 'id']).execute();

  await db.schema
    .createTable('storage_sweeps')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('delete_after', 'timestamptz', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('storage_sweeps_due').on('storage_sweeps').column('delete_after').execute();
  await sql`
    create function tool_files_sweep_bytes() returns trigger language plpgsql as $$
    begin
      if tg_op = 'DELETE' then
        if old.storage_key is not null then
          insert into storage_sweeps (key, delete_after) values (old.storage_key, now())
            on conflict (key) do update set delete_after = least(storage_sweeps.delete_after, excluded.delete_after);
        end if;
        return old;
      end if;
      if old.storage_key is not null and old.storage_key is distinct from new.storage_key then
        insert into storage_sweeps (key, delete_after) values (old.storage_key, now())
          on conflict (key) do update set delete_after = least(storage_sweeps.delete_after, excluded.delete_after);
      end if;
      return new;
    end
    $$`.execute(db);
  await sql`create trigger tool_files_sweep_bytes after update of storage_key or delete on tool_files
    for each row execute function tool_files_sweep_bytes()`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger if exists tool_files_sweep_bytes on tool_files`.execute(db);
  await sql`drop function if exists tool_files_sweep_bytes()`.execute(db);
  await db.schema.dropTable('storage_sweeps').execute();
  await dropTouchUpdatedAt(db, 'tool_files');
  await db.schema.dropTable('tool_files').execute();
  await dropTouchUpdatedAt(db, 'upload_requests');
  await db.schema.dropTable('upload_requests').execute();
}
