// A synthetic tool run through `POST /synthetic-tool/{id}/execute` leaves the same tool-call
// records as one run over MCP, but no MCP server or user toolbox served it: those two are
// null on its records.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('tool_call_records')
    .alterColumn('mcp_server_id', (c) => c.dropNotNull())
    .alterColumn('user_toolbox_id', (c) => c.dropNotNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db
    .deleteFrom('tool_call_records')
    .where((eb) => eb.or([eb('mcp_server_id', 'is', null), eb('user_toolbox_id', 'is', null)]))
    .execute();
  await db.schema
    .alterTable('tool_call_records')
    .alterColumn('mcp_server_id', (c) => c.setNotNull())
    .alterColumn('user_toolbox_id', (c) => c.setNotNull())
    .execute();
}
