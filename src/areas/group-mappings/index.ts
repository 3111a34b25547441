/** What other parts of the app use of this area: SCIM group changes re-apply the mappings. */
export { reconcileMappedGrants } from './grants';
