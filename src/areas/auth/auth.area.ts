import { defineArea } from '../../http/area';
import { acceptInviteLink, activateInvite } from './invite-activation';
import { logOut } from './log-out';
import { confirmMagicLink, requestMagicLink, verifyMagicLink } from './magic-link';
import { SIGN_IN_PAGES } from './pages';
import { beginStepUp, verifyMfaChallenge, verifyStepUp } from './second-factor';
import { activateSignup, confirmSignup, resendSignupEmail, signUp } from './sign-up';

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
  },
  pages: SIGN_IN_PAGES,
});
