/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { connectionServing } from './sso-connections.service';
export { clientSecretContext, samlUrls, oidcUrls, refreshSamlMetadata } from './sso-connections.service';
export {
  connectionForEmail,
  emailDomain,
  refuseUnlessSsoOptional,
  ssoAccount,
  ssoRequired,
  usableConnection,
  type SsoConnectionRow,
  type SsoIdentity,
  type SsoOutcome,
} from './sso-sign-in';
export { findConnectionById as connectionById } from './sso-connections.repo';
