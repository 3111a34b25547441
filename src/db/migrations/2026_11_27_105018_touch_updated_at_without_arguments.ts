// `updated_at` never moved on the tables whose trigger names no bookkeeping columns (teams,
// roles, organizations, templates, toolboxes, access requests, …): with no trigger arguments
// plpgsql's tg_argv is NULL, not an empty array, and `jsonb - NULL` is NULL, so the two rows
// always compared equal. The function now treats no arguments as no columns to ignore; the
// triggers themselves stay as they are.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace function touch_updated_at() returns trigger language plpgsql as $$
    declare
      ignored text[] := coalesce(tg_argv, '{}'::text[]);
    begin
      if new.updated_at is distinct from old.updated_at then
        return new;
      end if;
      if (to_jsonb(new) - 'updated_at' - ignored) is distinct from (to_jsonb(old) - 'updated_at' - ignored) then
        new.updated_at := now();
      end if;
      return new;
    end
    $$`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace function touch_updated_at() returns trigger language plpgsql as $$
    begin
      if new.updated_at is distinct from old.updated_at then
        return new;
      end if;
      if (to_jsonb(new) - 'updated_at' - tg_argv) is distinct from (to_jsonb(old) - 'updated_at' - tg_argv) then
        new.updated_at := now();
      end if;
      return new;
    end
    $$`.execute(db);
}
