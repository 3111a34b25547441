/**
 * What user toolboxes are made from, as the toolboxes area offers it: templates (the template
 * kind copies one) and toolboxes shared with the person (each is a dynamic user toolbox).
 */
export { findVisibleTemplate, toolboxEntries, toolboxesSharedWith, type TemplateRow, type ToolboxEntryRow, type ToolboxRow } from '../toolboxes';
