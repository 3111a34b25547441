/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { joinVerifiedDomains } from './org-domains.service';
