import type { ProcessDeps } from '../http/context';
import type { Metrics } from '../lib/metrics';
import { InFlightCalls } from './in-flight';
import { ServedToolsCache } from './served-tools';
import { ToolCallRecords } from './tool-call-records';
import { UpstreamPool } from './upstream/pool';

/**
 * The MCP runtime's long-lived state, one per app: created by createApp, handed to every
 * request as `deps.mcp`, closed when the app closes. Nothing of it lives in module variables,
 * so two apps in one process (the tests) share nothing.
 */
export class McpRuntime {
  /** What each MCP server serves, remembered (served-tools.ts). */
  readonly servedTools: ServedToolsCache;
  /** Upstream sessions kept open between calls (upstream/pool.ts). */
  readonly upstream: UpstreamPool;
  /** Tool-call records waiting for their batched INSERT (tool-call-records.ts). */
  readonly toolCalls: ToolCallRecords;
  /** Calls a `notifications/cancelled` may stop (in-flight.ts). */
  readonly inFlight = new InFlightCalls();

  constructor(deps: Pick<ProcessDeps, 'config' | 'db' | 'logger'>, metrics?: Metrics) {
    this.servedTools = new ServedToolsCache(deps.config.servedTools);
    this.upstream = new UpstreamPool(deps.config.upstreamMcp);
    this.toolCalls = new ToolCallRecords(deps.db, deps.logger, metrics);
  }

  /** Follows the change notifications what it remembers depends on. */
  async start(deps: Pick<ProcessDeps, 'listen' | 'logger'>): Promise<void> {
    await this.servedTools.follow(deps.listen, deps.logger);
  }

  /** App shutdown: stop listening, write the records still buffered, close the upstream sessions. */
  async close(): Promise<void> {
    await this.servedTools.stop();
    await this.toolCalls.flush();
    await this.upstream.close();
  }
}

declare module '../http/context' {
  interface AppDeps {
    mcp: McpRuntime;
  }
}
