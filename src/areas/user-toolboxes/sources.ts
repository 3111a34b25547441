import type { Executor } from '../../db/database';
import type { Row } from '../../db/schema';
import { isSharedWith, sharedWithQuery } from '../../auth/shares';

/**
 * What user toolboxes are made from: templates (the template kind copies one) and toolboxes
 * shared with the person (each is a dynamic user toolbox). The signatures are the issue 10
 * brief's for the toolboxes area (`src/areas/toolboxes/`); until that branch is merged they
 * are read here straight from the tables, and once it is, this file re-exports its functions.
 */

export type TemplateRow = Row<'templates'>;
export type ToolboxRow = Row<'toolboxes'>;
export type ToolboxEntryRow = Row<'toolbox_entries'>;

/** The toolboxes shared with the user (directly, through a team, or the organization), oldest first. */
export function toolboxesSharedWith(db: Executor, orgId: string, userId: string): Promise<ToolboxRow[]> {
  return db
    .selectFrom('toolboxes')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('id', 'in', sharedWithQuery(db, orgId, userId, 'toolbox'))
    .orderBy('id')
    .execute();
}

/** The entries of the toolboxes, in their order, by toolbox id. */
export async function toolboxEntries(db: Executor, toolboxIds: string[]): Promise<Map<string, ToolboxEntryRow[]>> {
  const byToolbox = new Map<string, ToolboxEntryRow[]>(toolboxIds.map((id) => [id, []]));
  if (toolboxIds.length === 0) return byToolbox;
  const rows = await db.selectFrom('toolbox_entries').selectAll().where('toolbox_id', 'in', toolboxIds).orderBy('toolbox_id').orderBy('position').execute();
  for (const row of rows) byToolbox.get(row.toolbox_id)?.push(row);
  return byToolbox;
}

/** A template the user sees: theirs, shared with them, or any of the organization's with `template:manage`. */
export async function findVisibleTemplate(db: Executor, orgId: string, userId: string, canManage: boolean, id: string): Promise<TemplateRow | null> {
  const row = await db.selectFrom('templates').selectAll().where('org_id', '=', orgId).where('id', '=', id).executeTakeFirst();
  if (!row) return null;
  if (canManage || row.owner_user_id === userId) return row;
  return (await isSharedWith(db, orgId, userId, 'template', id)) ? row : null;
}
