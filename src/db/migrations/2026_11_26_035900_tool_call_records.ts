// Tool-call records: one row per `tools/call` served by an MCP server's endpoint (succeeded,
// failed or refused), for logging destinations and usage; not audit entries. Ids are not
// exposed, so a plain identity column. No foreign keys: a record outlives the MCP server,
// connection and user toolbox it names (which may be dynamic ids that are not rows).
import { sql, type Kysely } from 'kysely';
import { reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('tool_call_records')
    .addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity())
    .addColumn('org_id', reference, (c) => c.notNull())
    .addColumn('mcp_server_id', reference, (c) => c.notNull())
    .addColumn('user_id', reference, (c) => c.notNull())
    .addColumn('user_toolbox_id', reference, (c) => c.notNull())
    .addColumn('connection_id', reference)
    .addColumn('connector_slug', 'text')
    .addColumn('synthetic_tool_id', reference)
    // The name the client called (`<connector_slug>__<tool>` or a synthetic tool's name) and the upstream tool's own.
    .addColumn('tool_name', 'text', (c) => c.notNull())
    .addColumn('upstream_tool', 'text')
    // succeeded | tool_error | refused | held | unavailable | cancelled
    .addColumn('outcome', 'text', (c) => c.notNull())
    .addColumn('error', 'text')
    .addColumn('duration_ms', 'integer', (c) => c.notNull())
    .addColumn('request_id', 'text', (c) => c.notNull())
    .addColumn('jsonrpc_id', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('tool_call_records_org_id_idx').on('tool_call_records').columns(['org_id', 'id']).execute();
  await db.schema.createIndex('tool_call_records_mcp_server_id_idx').on('tool_call_records').columns(['mcp_server_id', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('tool_call_records').execute();
}
