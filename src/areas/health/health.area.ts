import { defineArea } from '../../http/area';

export const HEALTH = { ok: true, service: 'mcp-control-plane' } as const;

export default defineArea({
  tag: 'Health',
  handlers: {
    // The app answers GET /health before routing (liveness probes are frequent); this
    // handler serves what reaches the router anyway, and documents the same body.
    async getHealth() {
      return { status: 200, body: HEALTH };
    },
  },
});
