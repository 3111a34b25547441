/** What other areas use of files: the bytes an organization's files hold (its file_storage_bytes usage). */
export { storedBytes as fileStorageUsed } from './files.repo';
