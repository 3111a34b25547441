// An MCP server whose token an API token minted (or last rotated) acts within that API token's
// permissions and only while it is valid: `minted_by_token_id` names it (null: a session
// minted it, and the owner's own permissions apply). Deleted with the API token's row, which
// only goes with its member or organization. Changes with token_hash (a rotation), which
// already notifies `cp_credentials`.
import type { Kysely } from 'kysely';
import { reference } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('mcp_servers')
    .addColumn('minted_by_token_id', reference, (c) => c.references('api_tokens.id').onDelete('cascade'))
    .execute();
  await db.schema
    .createIndex('mcp_servers_minted_by_token_idx')
    .on('mcp_servers')
    .column('minted_by_token_id')
    .where('minted_by_token_id', 'is not', null)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('mcp_servers_minted_by_token_idx').execute();
  await db.schema.alterTable('mcp_servers').dropColumn('minted_by_token_id').execute();
}
