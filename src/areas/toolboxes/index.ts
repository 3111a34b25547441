/**
 * What the toolboxes area offers the others (user toolboxes, the MCP endpoint):
 * toolboxes shared with a member and their entries, and the templates a member sees.
 */
export { toolboxesSharedWith, toolboxEntries, type ToolboxRow, type ToolboxEntryRow } from './toolboxes.repo';
export { findVisibleTemplate, type TemplateRow, type StoredTemplateEntry } from '../templates';
