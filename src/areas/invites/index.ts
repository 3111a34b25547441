/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { AcceptOutcome, acceptInvite, checkGrantable, peekInvite, resolveRoles } from './invites.service';
