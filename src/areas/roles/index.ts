/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { rolesIn, systemRoleId } from './roles.repo';
export { permissionsOf, requireHeld } from './roles.service';
