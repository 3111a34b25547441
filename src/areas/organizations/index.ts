/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { toOrganization } from './organizations.mapper';
export { createOrganizationWithOwner } from './organizations.service';
