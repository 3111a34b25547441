import { defineArea } from '../../http/area';
import { activateInvite } from './invite-activation';
import { logOut } from './log-out';
import { confirmMagicLink, requestMagicLink, verifyMagicLink } from './magic-link';
import { SIGN_IN_PAGES } from './pages';
import { beginStepUp, verifyMfaChallenge, verifyStepUp } from './second-factor';
import { completeSocialLogin, listAuthProviders, startSocialLogin } from './social-login';

/**
 * The Auth tag: sessions (logOut) and the invite link (activateInvite, on the invites area's
 * acceptInvite). The sign-in flows are being built here one by one.
 */
export default defineArea({
  tag: 'Auth',
  handlers: {
    activateInvite,
    logOut,
    requestMagicLink,
    verifyMagicLink,
    confirmMagicLink,
    verifyMfaChallenge,
    beginStepUp,
    verifyStepUp,
    listAuthProviders,
    startSocialLogin,
    completeSocialLogin,
  },
  pages: SIGN_IN_PAGES,
});
