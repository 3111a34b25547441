import { NotifiedCache } from '../db/notified-cache';
import type { AppDeps } from '../http/context';
import { loadPolicyForMember } from '../access/policy';
import { ConnectionRow, findConnections } from '../areas/connections';
import { resolveConnectorForMember, type ResolvedConnector } from '../areas/connectors';
import { resolveUserToolbox, toolsOf, type OfferedTool } from '../areas/user-toolboxes';

/**
 * What an MCP server serves: its row, the tools its user toolbox offers the owner now (policy
 * applied), and the connections and connectors calls to them go through. The MCP endpoint
 * reads it on every request, so it is remembered per process (NotifiedCache): triggers on every
 * table it comes from notify `cp_served_tools` with the organization changed (migration
 * 2026_11_26_090001; other organizations' servers stay remembered), this process's own commits
 * clear the acting organization's at once (the endpoint module's afterCommit; a write outside any
 * organization clears everything), and a live exception's expiry ends it.
 */

export const SERVED_TOOLS_CHANNEL = 'cp_served_tools';

/**
 * The tables whose triggers notify SERVED_TOOLS_CHANNEL: a write of this process that touches
 * none of them leaves what the servers serve remembered (test/integration/written-tables.test.ts keeps
 * the two lists equal).
 */
export const SERVED_TOOLS_TABLES: ReadonlySet<string> = new Set([
  'mcp_servers',
  'connections',
  'connection_tools',
  'connectors',
  'catalog_versions',
  'user_toolboxes',
  'user_toolbox_bindings',
  'toolboxes',
  'toolbox_entries',
  'templates',
  'synthetic_tools',
  'shares',
  'restrictions',
  'access_requests',
  'memberships',
  'roles',
  'role_assignments',
  'teams',
  'team_members',
]);

export interface McpServerRow {
  id: string;
  org_id: string;
  user_toolbox_id: string;
  owner_user_id: string;
  name: string;
  /** `unavailable`: its dynamic user toolbox is gone, or its owner no longer reaches the toolbox; it lists no tools. */
  status: string;
}

type Deps = Pick<AppDeps, 'db' | 'secrets'>;

export class ServedTools {
  /** By the name a client calls (`<connector_slug>__<tool>`, or a synthetic tool's). */
  readonly byName: ReadonlyMap<string, OfferedTool>;
  private readonly connectors = new Map<string, Promise<ResolvedConnector | null>>();

  constructor(
    private readonly deps: Deps,
    /** Null: no such MCP server. */
    readonly server: McpServerRow | null,
    /** Everything the owner may see, synthetic tools included (whether the caller may run those is the caller's). */
    readonly tools: readonly OfferedTool[],
    /**
     * The rows of the connections the tools go through, read with the tools. Kept up to date
     * by the endpoint's bookkeeping (`last_used_at`, `last_error`), which notifies nothing.
     */
    private readonly connections: ReadonlyMap<string, ConnectionRow>,
  ) {
    this.byName = new Map(tools.map((tool) => [tool.name, tool]));
  }

  connection(id: string): ConnectionRow | undefined {
    return this.connections.get(id);
  }

  /** The connector as the connection's owner sees it now, read on first use (a failed read is not kept). */
  connector(ownerUserId: string, slug: string): Promise<ResolvedConnector | null> {
    const key = `${ownerUserId}\u0000${slug}`;
    let found = this.connectors.get(key);
    if (!found) {
      const server = this.server as McpServerRow;
      found = resolveConnectorForMember(this.deps.db, this.deps.secrets, server.org_id, ownerUserId, slug);
      this.connectors.set(key, found);
      found.catch(() => this.connectors.delete(key));
    }
    return found;
  }
}

async function load(deps: Deps, mcpId: string): Promise<{ value: ServedTools; until?: number; scope: string }> {
  const server = await deps.db
    .selectFrom('mcp_servers')
    .select(['id', 'org_id', 'user_toolbox_id', 'owner_user_id', 'name', 'status'])
    .where('id', '=', mcpId)
    .executeTakeFirst();
  // No such server: not worth remembering (its token was good a moment ago), and of no organization to forget it with.
  if (!server) return { value: new ServedTools(deps, null, [], new Map()), until: 0, scope: '' };
  const scope = server.org_id;
  if (server.status !== 'active') return { value: new ServedTools(deps, server, [], new Map()), scope };
  // The box and the owner's policy are independent reads: side by side.
  const [box, policy] = await Promise.all([
    resolveUserToolbox(deps.db, server.org_id, server.owner_user_id, server.user_toolbox_id, { withoutDates: true }),
    loadPolicyForMember(deps.db, server.org_id, server.owner_user_id, new Date()),
  ]);
  if (!box) return { value: new ServedTools(deps, server, [], new Map()), until: policy.changesAt?.getTime(), scope };
  const active = box.sources.flatMap((s) => (s.type === 'connection' && s.serves ? [s.connection_id] : []));
  const [tools, rows] = await Promise.all([toolsOf(deps, box, policy), findConnections(deps.db, server.org_id, [...new Set(active)])]);
  return { value: new ServedTools(deps, server, tools, new Map(rows.map((row) => [row.id, row]))), until: policy.changesAt?.getTime(), scope };
}

/**
 * What the MCP servers serve, remembered for one app (McpRuntime.servedTools): read on a
 * miss, forgotten on the change notifications it follows and on this process's own commits.
 */
export class ServedToolsCache {
  private readonly cache: NotifiedCache<ServedTools>;
  private stopFollowing: (() => Promise<void>) | null = null;

  constructor(private readonly options: AppDeps['config']['servedTools']) {
    this.cache = new NotifiedCache({ maxAgeMs: options.cacheSeconds * 1000, maxEntries: options.maxServers });
  }

  /** What the MCP server serves now: remembered, or read (and then remembered when it may be). */
  get(deps: Deps, mcpId: string): ServedTools | Promise<ServedTools> {
    return this.cache.get(mcpId, () => load(deps, mcpId));
  }

  /** Starts remembering once the change notifications are heard (without a listener nothing is remembered). */
  async follow(listen: AppDeps['listen'], logger: AppDeps['logger']): Promise<void> {
    if (!listen || this.options.cacheSeconds === 0) return;
    this.stopFollowing = await this.cache.follow(listen, SERVED_TOOLS_CHANNEL, logger, 'MCP served-tools cache');
  }

  /** Stops listening and forgets (app shutdown). */
  async stop(): Promise<void> {
    const stop = this.stopFollowing;
    this.stopFollowing = null;
    await stop?.();
  }

  /** Forgets what the MCP servers of an organization serve ('': of every organization): a change this process committed. */
  forget(scope = ''): void {
    this.cache.clear(scope);
  }

  /** How many times it was cleared (tests wait on it to know a notification arrived). */
  get clears(): number {
    return this.cache.clears;
  }
}
