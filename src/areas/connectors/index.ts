/** What other parts of the app use of connectors: resolving a connector as a member sees it. */
export { clientSecretContext, lookup, resolveConnector, resolveConnectorForMember, seesConnector, visibleTo, type ResolvedConnector } from './resolve';
