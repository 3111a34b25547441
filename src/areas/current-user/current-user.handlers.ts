import type { Handlers } from '../../http/api';
import { currentUser } from './current-user.service';

export const currentUserHandlers = {
  async getCurrentUser({ query }, ctx) {
    return { status: 200, body: await currentUser(ctx.db, ctx.caller!, query.current_org_id) };
  },
} satisfies Partial<Handlers>;
