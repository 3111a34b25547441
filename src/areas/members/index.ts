/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { addMember, holdsOwner, lockOrganization, otherActiveOwners, setStatus, stripMembership } from './members.repo';
