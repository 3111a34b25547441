import { defineArea } from '../../http/area';
import { activateInvite } from './invite-activation';

/**
 * The Auth tag. Sign-in flows come with their own issue; for now only the invite link is
 * built (activateInvite), on the invites area's acceptInvite.
 */
export default defineArea({
  tag: 'Auth',
  handlers: {
    activateInvite,
  },
});
