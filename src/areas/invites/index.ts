/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { acceptInvite, checkGrantable, peekInvite, resolveRoles, type AcceptOutcome } from './invites.service';
