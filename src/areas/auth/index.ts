/** What other parts of the app use of this area (the SSO sign-in protocols end their flows with its machinery). */
export { signIn, signInFailed, webApp } from './sign-in';
export { CLEARED_FLOW_COOKIE, flowCookie, flowFailed, flowOf, secretsOf, withClearedFlow, type Flow } from './flow';
