// What sits between members' connections and their AI clients: templates, toolboxes and the
// members' own user toolboxes; synthetic tools; and the policy (restrictions, access
// requests) that hides or holds tools. One migration so that the references between them
// (a toolbox entry naming a synthetic tool, a restriction naming one) exist from the start.
// No foreign key to connectors: built-in connectors live in files.
import { sql, type Kysely } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

const now = sql`now()`;
const TABLES = ['templates', 'synthetic_tools', 'toolboxes', 'user_toolboxes', 'restrictions', 'access_requests'] as const;

export async function up(db: Kysely<any>): Promise<void> {
  // A toolbox shape: connectors, each with all of its tools or a list (TemplateEntry[] as JSON).
  await db.schema
    .createTable('templates')
    .addColumn('id', idColumn('tpl'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('owner_user_id', reference, (c) => c.notNull().references('users.id'))
    .addColumn('entries', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addUniqueConstraint('templates_org_id_name_key', ['org_id', 'name'])
    .execute();
  await db.schema.createIndex('templates_org_id_idx').on('templates').columns(['org_id', 'id']).execute();

  // Steps, input/output schemas and the output mapping as the spec's JSON; the connectors
  // and tools its steps call are read from `steps` (restrictions match a synthetic tool
  // through them).
  await db.schema
    .createTable('synthetic_tools')
    .addColumn('id', idColumn('stool'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text', (c) => c.notNull())
    .addColumn('input_schema', 'jsonb', (c) => c.notNull())
    .addColumn('output_schema', 'jsonb')
    .addColumn('steps', 'jsonb', (c) => c.notNull())
    .addColumn('output', 'jsonb', (c) => c.notNull())
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addUniqueConstraint('synthetic_tools_org_id_name_key', ['org_id', 'name'])
    .execute();
  await db.schema.createIndex('synthetic_tools_org_id_idx').on('synthetic_tools').columns(['org_id', 'id']).execute();

  await db.schema
    .createTable('toolboxes')
    .addColumn('id', idColumn('tbx'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addUniqueConstraint('toolboxes_org_id_name_key', ['org_id', 'name'])
    .execute();
  await db.schema.createIndex('toolboxes_org_id_idx').on('toolboxes').columns(['org_id', 'id']).execute();

  // Entries in their order; replaced wholesale by updateToolbox. Deleting a connection
  // removes its entries (deleteConnection says so); a synthetic tool still listed cannot be
  // deleted (409), hence no cascade there.
  await db.schema
    .createTable('toolbox_entries')
    .addColumn('toolbox_id', reference, (c) => c.notNull().references('toolboxes.id').onDelete('cascade'))
    .addColumn('position', 'integer', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull().check(sql`type in ('connection', 'synthetic_tool')`))
    .addColumn('connection_id', reference, (c) => c.references('connections.id').onDelete('cascade'))
    // 'all' or an array of tool names, as ToolboxToolSelection.
    .addColumn('tools', 'jsonb')
    .addColumn('synthetic_tool_id', reference, (c) => c.references('synthetic_tools.id'))
    .addPrimaryKeyConstraint('toolbox_entries_pkey', ['toolbox_id', 'position'])
    .addCheckConstraint(
      'toolbox_entries_shape',
      sql`(type = 'connection' and connection_id is not null and tools is not null and synthetic_tool_id is null)
      or (type = 'synthetic_tool' and synthetic_tool_id is not null and connection_id is null and tools is null)`,
    )
    .execute();
  await db.schema.createIndex('toolbox_entries_connection_idx').on('toolbox_entries').column('connection_id').execute();
  await db.schema.createIndex('toolbox_entries_synthetic_tool_idx').on('toolbox_entries').column('synthetic_tool_id').execute();

  // The stored (`template`) kind only; dynamic user toolboxes are computed. Entries are a
  // copy of the template's when made (TemplateEntry[] as JSON): the template may change or go.
  await db.schema
    .createTable('user_toolboxes')
    .addColumn('id', idColumn('utbx'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('owner_user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('template_id', reference, (c) => c.references('templates.id').onDelete('set null'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('entries', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addUniqueConstraint('user_toolboxes_owner_name_key', ['org_id', 'owner_user_id', 'name'])
    .execute();
  await db.schema.createIndex('user_toolboxes_owner_idx').on('user_toolboxes').columns(['org_id', 'owner_user_id', 'id']).execute();

  // Which of the owner's connections serves each connector; deleting the connection drops
  // the binding (the user toolbox becomes incomplete).
  await db.schema
    .createTable('user_toolbox_bindings')
    .addColumn('user_toolbox_id', reference, (c) => c.notNull().references('user_toolboxes.id').onDelete('cascade'))
    .addColumn('connector_slug', 'text', (c) => c.notNull())
    .addColumn('connection_id', reference, (c) => c.notNull().references('connections.id').onDelete('cascade'))
    .addPrimaryKeyConstraint('user_toolbox_bindings_pkey', ['user_toolbox_id', 'connector_slug'])
    .execute();
  await db.schema.createIndex('user_toolbox_bindings_connection_idx').on('user_toolbox_bindings').column('connection_id').execute();

  // A synthetic tool named by a restriction cannot be deleted (409), hence no cascade.
  await db.schema
    .createTable('restrictions')
    .addColumn('id', idColumn('rst'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('match_connector_slug', 'text')
    .addColumn('match_tool_pattern', 'text')
    .addColumn('match_synthetic_tool_id', reference, (c) => c.references('synthetic_tools.id'))
    .addColumn('effect', 'text', (c) => c.notNull().check(sql`effect in ('deny', 'require_approval')`))
    .addColumn('applies_to_everyone', 'boolean', (c) => c.notNull())
    .addColumn('applies_to_role_ids', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('applies_to_team_ids', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('applies_to_user_ids', sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn('is_active', 'boolean', (c) => c.notNull())
    .addColumn('created_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addCheckConstraint('restrictions_match_shape', sql`match_synthetic_tool_id is null or (match_connector_slug is null and match_tool_pattern is null)`)
    .addUniqueConstraint('restrictions_org_id_name_key', ['org_id', 'name'])
    .execute();
  await db.schema.createIndex('restrictions_org_id_idx').on('restrictions').columns(['org_id', 'id']).execute();

  // Access requests outlive their restriction (they stay readable), so restriction_id is
  // kept without a foreign key.
  await db.schema
    .createTable('access_requests')
    .addColumn('id', idColumn('areq'))
    .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('requester_user_id', reference, (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('restriction_id', reference, (c) => c.notNull())
    .addColumn('connector_slug', 'text')
    .addColumn('tool_name', 'text')
    .addColumn('synthetic_tool_id', reference)
    .addColumn('reason', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('pending', 'approved', 'denied', 'withdrawn')`))
    .addColumn('resolved_by_user_id', reference, (c) => c.references('users.id').onDelete('set null'))
    .addColumn('resolution_note', 'text')
    .addColumn('resolved_at', 'timestamptz')
    .addColumn('exception_expires_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(now))
    .execute();
  await db.schema.createIndex('access_requests_org_id_idx').on('access_requests').columns(['org_id', 'id']).execute();
  await db.schema.createIndex('access_requests_requester_idx').on('access_requests').columns(['org_id', 'requester_user_id', 'status']).execute();
  await db.schema.createIndex('access_requests_restriction_idx').on('access_requests').columns(['restriction_id', 'status']).execute();

  for (const table of TABLES) await touchUpdatedAt(db, table);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of TABLES) await dropTouchUpdatedAt(db, table);
  for (const table of [
    'access_requests',
    'restrictions',
    'user_toolbox_bindings',
    'user_toolboxes',
    'toolbox_entries',
    'toolboxes',
    'synthetic_tools',
    'templates',
  ]) {
    await db.schema.dropTable(table).execute();
  }
}
