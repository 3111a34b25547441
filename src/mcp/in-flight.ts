import type { JsonRpcId } from './endpoint/jsonrpc';

/**
 * Calls in flight in this process, by MCP server and JSON-RPC id, so that a
 * `notifications/cancelled` reaching the same replica stops its call. Clients of one server
 * number their requests alike (SDK clients count from 0) and the endpoint keeps no sessions to
 * tell them apart: a cancellation stops a call only while it is the one call with that id,
 * never a call of another client that happens to share it.
 */
export class InFlightCalls {
  private readonly calls = new Map<string, Set<AbortController>>();

  /** Registers a call; the controller aborts on cancellation, and `done` must be called when it ends. */
  start(serverId: string, id: JsonRpcId): { signal: AbortSignal; abort(): void; done(): void } {
    const key = keyOf(serverId, id);
    const controller = new AbortController();
    const calls = this.calls.get(key) ?? new Set<AbortController>();
    calls.add(controller);
    this.calls.set(key, calls);
    return {
      signal: controller.signal,
      abort: () => controller.abort(),
      done: () => {
        calls.delete(controller);
        if (calls.size === 0 && this.calls.get(key) === calls) this.calls.delete(key);
      },
    };
  }

  cancel(serverId: string, id: JsonRpcId): void {
    const calls = this.calls.get(keyOf(serverId, id));
    if (calls?.size === 1) for (const call of calls) call.abort();
  }
}

const keyOf = (serverId: string, id: JsonRpcId) => `${serverId}\u0000${typeof id}:${String(id)}`;
