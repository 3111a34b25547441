import type { Handlers } from '../../http/api';

export const healthHandlers = {
  async getHealth() {
    return { status: 200, body: { ok: true, service: 'mcp-control-plane' } };
  },
} satisfies Partial<Handlers>;
