import type { ApiTokenCaller, SessionCaller } from '../../identity/credentials';
import { defineArea } from '../../http/area';
import { beginTotp, disableTotp, listSecurityEvents, regenerateRecoveryCodes, verifyTotp } from './current-user.mfa';
import { currentUser } from './current-user.service';

export default defineArea({
  tag: 'Current user',
  handlers: {
    async getCurrentUser({ query }, ctx) {
      const caller = ctx.authenticated as ApiTokenCaller | SessionCaller;
      return { status: 200, body: await currentUser(ctx.db, caller, query.current_org_id) };
    },
    beginTotpEnrollment: beginTotp,
    verifyTotpEnrollment: verifyTotp,
    disableTotp,
    regenerateRecoveryCodes,
    listSecurityEvents,
  },
});
