import { defineArea } from '../../http/area';
import * as audit from './audit-log.service';

export default defineArea({
  tag: 'Audit log',
  handlers: {
    async listAuditEvents({ query }, ctx) {
      return { status: 200, body: await audit.list(ctx, query) };
    },
    async getAuditEvent({ params }, ctx) {
      return { status: 200, body: await audit.get(ctx, params.id) };
    },
  },
});
