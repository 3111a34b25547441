/** What other areas use of templates: the templates a member sees. */
export { findVisibleTemplate, type TemplateRow, type StoredTemplateEntry } from './templates.repo';
