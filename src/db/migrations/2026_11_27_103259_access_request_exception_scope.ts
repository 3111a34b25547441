// What an approved exception covers is fixed when it is approved: the connector and the tools
// the restriction matched then, narrowed to what the request named. A restriction broadened
// afterwards (`search` → `*`) holds back the new tools again instead of handing them to every
// exception granted under the narrower one. Null: no bound beyond `connector_slug` and
// `tool_name` (a pending, denied or withdrawn request, or one on a synthetic tool).
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('access_requests').addColumn('exception_connector_slug', 'text').addColumn('exception_tool_pattern', 'text').execute();
  // Exceptions approved before this was recorded: the restriction as it is now is the best
  // knowledge of what it matched when they were approved.
  await sql`
    update access_requests ar
    set exception_connector_slug = coalesce(ar.connector_slug, r.match_connector_slug),
        exception_tool_pattern = coalesce(ar.tool_name, r.match_tool_pattern, '*')
    from restrictions r
    where r.id = ar.restriction_id and r.org_id = ar.org_id
      and ar.status = 'approved' and ar.synthetic_tool_id is null and r.match_synthetic_tool_id is null`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('access_requests').dropColumn('exception_connector_slug').dropColumn('exception_tool_pattern').execute();
}
