/**
 * What the toolboxes area offers the others (user toolboxes, and the MCP endpoint):
 * toolboxes shared with a member and their entries, the templates a member sees, and the
 * hooks that run when a toolbox goes or a share of it is revoked.
 */
export { toolboxesSharedWith, toolboxEntries, type ToolboxRow, type ToolboxEntryRow } from './toolboxes.repo';
export { findVisibleTemplate, type TemplateRow, type StoredTemplateEntry } from '../templates/templates.repo';
export { toolboxDeletedHooks, toolboxAccessHooks, type ToolboxDeletedHook, type ToolboxAccessHook } from './hooks';
