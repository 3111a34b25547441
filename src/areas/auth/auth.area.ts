import { defineArea } from '../../http/area';
import { acceptInviteLink, activateInvite } from './invite-activation';
import { logOut } from './log-out';
import { confirmMagicLink, requestMagicLink, verifyMagicLink } from './magic-link';
import { PASSKEY_PAGES } from './passkey-pages';
import { SIGN_IN_PAGES } from './pages';
import * as passkeys from './passkeys';
import { beginStepUp, verifyMfaChallenge, verifyStepUp } from './second-factor';
import { activateSignup, confirmSignup, resendSignupEmail, signUp } from './sign-up';
import { completeSocialLogin, listAuthProviders, startSocialLogin } from './social-login';

/**
 * The Auth tag: sessions (logOut) and the invite link (activateInvite, on the invites area's
 * acceptInvite). The sign-in flows are being built here one by one.
 */
export default defineArea({
  tag: 'Auth',
  handlers: {
    activateInvite,
    acceptInviteLink,
    logOut,
    requestMagicLink,
    verifyMagicLink,
    confirmMagicLink,
    verifyMfaChallenge,
    beginStepUp,
    verifyStepUp,
    signUp,
    resendSignupEmail,
    activateSignup,
    confirmSignup,
    beginPasskeyRegistration: passkeys.beginPasskeyRegistration,
    verifyPasskeyRegistration: passkeys.verifyPasskeyRegistration,
    listPasskeys: passkeys.listPasskeys,
    renamePasskey: passkeys.renamePasskey,
    deletePasskey: passkeys.deletePasskey,
    beginPasskeyAuthentication: passkeys.beginPasskeyAuthentication,
    verifyPasskeyAuthentication: passkeys.verifyPasskeyAuthentication,
    listAuthProviders,
    startSocialLogin,
    completeSocialLogin,
  },
  pages: { ...SIGN_IN_PAGES, ...PASSKEY_PAGES },
});
