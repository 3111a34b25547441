import type { components } from '../../../generated/openapi';
import { isActiveMember } from '../../identity/credentials';
import type { Executor } from '../../db/database';
import type { AppDeps } from '../../http/context';
import { stepToolsOf, type SyntheticToolStep } from '../synthetic-tools';
import type { ToolPolicy, ToolRef, Verdict } from './policy';
import * as repo from './user-toolboxes.repo';
import { toolboxEntries, toolboxesSharedWith, type ToolboxEntryRow, type ToolboxRow } from './sources';

/**
 * A user toolbox of one person, stored (`template`) or computed (`dynamic`), resolved to the
 * connections that serve it and their live states: what the user toolbox operations answer,
 * and what the MCP endpoint serves through `toolsOf`. Nothing here calls an
 * upstream: tools come from the connections' tool caches.
 */

export type TemplateEntry = components['schemas']['TemplateEntry'];
export type Binding = components['schemas']['UserToolboxBinding'];
type ConnectionStatus = components['schemas']['ConnectionStatus'];
type ConnectionTool = components['schemas']['ConnectionTool'];
type Selection = TemplateEntry['tools'];

export const DYN_ALL = 'utbx_dyn_all';
const DYN_TBX = 'utbx_dyn_tbx_';
export const DYN_ALL_NAME = 'All my connections';

export const isDynamicId = (id: string): boolean => id === DYN_ALL || id.startsWith(DYN_TBX);
/** `tbx_<suffix>` → `utbx_dyn_tbx_<suffix>`. */
export const dynamicIdOf = (toolboxId: string): string => `${DYN_TBX}${toolboxId.slice('tbx_'.length)}`;
const toolboxIdOf = (dynamicId: string): string => `tbx_${dynamicId.slice(DYN_TBX.length)}`;

/** One connection's tools offered by the box: the connection acts with its owner's credentials. */
export interface ConnectionSource {
  type: 'connection';
  connector_slug: string;
  connection_id: string;
  connection_owner_user_id: string;
  /** Live: only an `active` connection's tools are offered. */
  status: ConnectionStatus;
  /** Live: whether its tools are offered: `active`, and not awaiting its new owner's acceptance of a transfer. */
  serves: boolean;
  tools: Selection;
}
export interface SyntheticSource {
  type: 'synthetic_tool';
  synthetic_tool_id: string;
}
export type ToolSource = ConnectionSource | SyntheticSource;

export interface ResolvedUserToolbox {
  id: string;
  kind: 'template' | 'dynamic';
  orgId: string;
  ownerUserId: string;
  name: string;
  description: string | null;
  templateId: string | null;
  toolboxId: string | null;
  /** The template's entries as copied (template kind); empty for a dynamic one. */
  entries: TemplateEntry[];
  /** The owner's own connections that serve the entries, in entry order (template kind). */
  bindings: Binding[];
  /** What the tools come from, in order. */
  sources: ToolSource[];
  status: 'ready' | 'incomplete';
  incompleteConnectorSlugs: string[];
  createdAt: Date;
  updatedAt: Date;
}

/** A tool the box offers now, as an MCP client would list it, and where calls to it go. */
export interface OfferedTool {
  /** `<connector_slug>__<tool>` for an upstream tool; the synthetic tool's own name for a synthetic one. */
  name: string;
  title: string | null;
  description: string | null;
  input_schema: ConnectionTool['input_schema'];
  output_schema: ConnectionTool['output_schema'];
  annotations: ConnectionTool['annotations'];
  source:
    | { kind: 'upstream'; connection_id: string; connector_slug: string; tool: string }
    | { kind: 'synthetic'; synthetic_tool_id: string; steps: { connector_slug: string; tool: string }[] };
  /** The policy's verdict (listed is always true here): `callable` false means a call is held or refused. */
  verdict: Verdict;
}

const unique = (values: string[]) => [...new Set(values)];
/**
 * Whether a connection serves the boxes it is in: `active`, and, when it was handed over with
 * its credentials (which act as whoever authorized them), accepted by its new owner.
 */
const serves = (c: repo.ConnectionStateRow) => c.status === 'active' && !c.awaiting_acceptance;
const latest = (dates: Date[], fallback: Date) => dates.reduce((a, b) => (b > a ? b : a), dates[0] ?? fallback);

// ---------------------------------------------------------------------------------------
// Resolving: from rows (already loaded) to resolved boxes, so a page resolves in a few queries
// ---------------------------------------------------------------------------------------

/** Everything needed to resolve a set of user toolboxes of one owner, loaded in a handful of queries. */
export interface Loaded {
  orgId: string;
  ownerUserId: string;
  stored: repo.UserToolboxRow[];
  bindings: Map<string, repo.BindingRow[]>;
  /** The owner's own connections, those they made before those they received (for `utbx_dyn_all`), when it is wanted. */
  ownConnections: repo.ConnectionStateRow[] | null;
  toolboxes: ToolboxRow[];
  entries: Map<string, ToolboxEntryRow[]>;
  connections: Map<string, repo.ConnectionStateRow>;
  /** When the owner joined the organization: `utbx_dyn_all`'s dates while they have no connection. */
  joinedAt: Date;
}

export async function load(
  db: Executor,
  orgId: string,
  ownerUserId: string,
  want: { stored: repo.UserToolboxRow[]; dynAll: boolean; toolboxes: ToolboxRow[]; withoutDates?: boolean },
): Promise<Loaded> {
  // Independent reads, side by side (on a pool they overlap; the embedded database queues them).
  const [bindings, entries, ownConnections, joinedAt] = await Promise.all([
    repo.bindingsOf(
      db,
      want.stored.map((r) => r.id),
    ),
    toolboxEntries(
      db,
      want.toolboxes.map((t) => t.id),
    ),
    want.dynAll ? repo.connectionsOwnedBy(db, orgId, ownerUserId) : null,
    want.dynAll && !want.withoutDates ? repo.joinedAt(db, orgId, ownerUserId) : new Date(0),
  ]);
  const ids = new Set<string>();
  for (const list of bindings.values()) for (const b of list) ids.add(b.connection_id);
  for (const list of entries.values()) for (const e of list) if (e.connection_id) ids.add(e.connection_id);
  const connections = new Map<string, repo.ConnectionStateRow>((ownConnections ?? []).map((c) => [c.id, c]));
  for (const c of await repo.connectionStates(
    db,
    orgId,
    [...ids].filter((id) => !connections.has(id)),
  ))
    connections.set(c.id, c);
  return { orgId, ownerUserId, ...want, bindings, entries, ownConnections, connections, joinedAt };
}

function statusOf(incomplete: string[]): Pick<ResolvedUserToolbox, 'status' | 'incompleteConnectorSlugs'> {
  const slugs = unique(incomplete);
  return { status: slugs.length > 0 ? 'incomplete' : 'ready', incompleteConnectorSlugs: slugs };
}

export function resolveStored(loaded: Loaded, row: repo.UserToolboxRow): ResolvedUserToolbox {
  const entries = row.entries as TemplateEntry[];
  const bySlug = new Map((loaded.bindings.get(row.id) ?? []).map((b) => [b.connector_slug, b]));
  const bindings: Binding[] = [];
  const sources: ToolSource[] = [];
  const incomplete: string[] = [];
  for (const entry of entries) {
    const binding = bySlug.get(entry.connector_slug);
    const connection = binding && loaded.connections.get(binding.connection_id);
    // A connection given away (transferred) or of another connector no longer serves the box.
    if (!connection || connection.owner_user_id !== row.owner_user_id || connection.connector_slug !== entry.connector_slug) {
      incomplete.push(entry.connector_slug);
      continue;
    }
    bindings.push({ connector_slug: entry.connector_slug, connection_id: connection.id });
    sources.push({
      type: 'connection',
      connector_slug: entry.connector_slug,
      connection_id: connection.id,
      connection_owner_user_id: connection.owner_user_id,
      status: connection.status,
      serves: serves(connection),
      tools: entry.tools,
    });
    if (!serves(connection)) incomplete.push(entry.connector_slug);
  }
  return {
    id: row.id,
    kind: 'template',
    orgId: row.org_id,
    ownerUserId: row.owner_user_id,
    name: row.name,
    description: row.description,
    templateId: row.template_id,
    toolboxId: null,
    entries,
    bindings,
    sources,
    ...statusOf(incomplete),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/**
 * `utbx_dyn_all`: every tool of every connection of the owner, those they made before those
 * they received by transfer (connectionsOwnedBy's order). A connector is incomplete when none
 * of the owner's connections to it serves.
 */
export function resolveDynAll(loaded: Loaded): ResolvedUserToolbox {
  const own = loaded.ownConnections ?? [];
  const activeSlugs = new Set(own.filter(serves).map((c) => c.connector_slug));
  return {
    id: DYN_ALL,
    kind: 'dynamic',
    orgId: loaded.orgId,
    ownerUserId: loaded.ownerUserId,
    name: DYN_ALL_NAME,
    description: null,
    templateId: null,
    toolboxId: null,
    entries: [],
    bindings: [],
    sources: own.map((c) => ({
      type: 'connection',
      connector_slug: c.connector_slug,
      connection_id: c.id,
      connection_owner_user_id: c.owner_user_id,
      status: c.status,
      serves: serves(c),
      tools: 'all',
    })),
    ...statusOf(own.filter((c) => !activeSlugs.has(c.connector_slug)).map((c) => c.connector_slug)),
    createdAt: latest(
      own.map((c) => c.created_at),
      loaded.joinedAt,
    ),
    updatedAt: latest(
      own.map((c) => c.updated_at),
      loaded.joinedAt,
    ),
  };
}

/** `utbx_dyn_tbx_…`: a toolbox shared with the owner; its connection entries act as their connections' owners. */
export function resolveDynToolbox(loaded: Loaded, toolbox: ToolboxRow): ResolvedUserToolbox {
  const sources: ToolSource[] = [];
  const incomplete: string[] = [];
  for (const entry of loaded.entries.get(toolbox.id) ?? []) {
    if (entry.type === 'synthetic_tool' && entry.synthetic_tool_id) {
      sources.push({ type: 'synthetic_tool', synthetic_tool_id: entry.synthetic_tool_id });
      continue;
    }
    const connection = entry.connection_id ? loaded.connections.get(entry.connection_id) : undefined;
    if (!connection) continue; // deleting a connection deletes its entries; nothing to serve
    sources.push({
      type: 'connection',
      connector_slug: connection.connector_slug,
      connection_id: connection.id,
      connection_owner_user_id: connection.owner_user_id,
      status: connection.status,
      serves: serves(connection),
      tools: (entry.tools ?? 'all') as Selection,
    });
    if (!serves(connection)) incomplete.push(connection.connector_slug);
  }
  return {
    id: dynamicIdOf(toolbox.id),
    kind: 'dynamic',
    orgId: toolbox.org_id,
    ownerUserId: loaded.ownerUserId,
    name: toolbox.name,
    description: toolbox.description,
    templateId: null,
    toolboxId: toolbox.id,
    entries: [],
    bindings: [],
    sources,
    ...statusOf(incomplete),
    createdAt: toolbox.created_at,
    updatedAt: toolbox.updated_at,
  };
}

/**
 * A user toolbox of the user (stored or dynamic: `utbx_dyn_all`, `utbx_dyn_tbx_<toolbox id
 * suffix>`), with its entries resolved to connections and its status; null when it is not
 * theirs or not visible (someone else's, or a toolbox not, or no longer, shared with them), and
 * for anyone who is not an active member of the organization.
 */
export async function resolveUserToolbox(
  db: Executor,
  orgId: string,
  userId: string,
  id: string,
  /** The MCP endpoint serves tools, not the box's dates: `utbx_dyn_all`'s dates then stay unread (one query less). */
  options: { withoutDates?: boolean } = {},
): Promise<ResolvedUserToolbox | null> {
  // Someone no longer (or not yet) an active member has no user toolboxes there, stored ones
  // included. For `utbx_dyn_all` (what most MCP servers serve) that is asked alongside the reads.
  if (id === DYN_ALL) {
    const [member, loaded] = await Promise.all([
      isActiveMember(db, orgId, userId),
      load(db, orgId, userId, { stored: [], dynAll: true, toolboxes: [], withoutDates: options.withoutDates }),
    ]);
    return member ? resolveDynAll(loaded) : null;
  }
  if (!(await isActiveMember(db, orgId, userId))) return null;
  if (id.startsWith(DYN_TBX)) {
    const toolboxId = toolboxIdOf(id);
    const toolbox = (await toolboxesSharedWith(db, orgId, userId)).find((t) => t.id === toolboxId);
    return toolbox ? resolveDynToolbox(await load(db, orgId, userId, { stored: [], dynAll: false, toolboxes: [toolbox] }), toolbox) : null;
  }
  const row = await repo.findOwned(db, orgId, userId, id);
  return row ? resolveStored(await load(db, orgId, userId, { stored: [row], dynAll: false, toolboxes: [] }), row) : null;
}

// ---------------------------------------------------------------------------------------
// The tools a box offers
// ---------------------------------------------------------------------------------------

const EMPTY_INPUT: ConnectionTool['input_schema'] = { type: 'object' } as ConnectionTool['input_schema'];

/**
 * The tools it offers now, from the connections' tool caches (no upstream round trip), each
 * entry's selection applied, minus what the policy denies; synthetic tools included under
 * their names. Upstream tools are named `<connector_slug>__<tool>`; only the tools of
 * connections that serve (active, and accepted when transferred with their credentials) are
 * offered; when two sources offer one name (two connections to one connector in
 * `utbx_dyn_all`), the first source's tool is kept: one the owner made before one they received.
 */
export async function toolsOf(deps: Pick<AppDeps, 'db'>, box: ResolvedUserToolbox, policy: ToolPolicy): Promise<OfferedTool[]> {
  const active = box.sources.filter((s): s is ConnectionSource => s.type === 'connection' && s.serves);
  const synthetic = box.sources.filter((s): s is SyntheticSource => s.type === 'synthetic_tool');
  const caches = await repo.toolCaches(deps.db, unique(active.map((s) => s.connection_id)));
  const syntheticRows = await repo.syntheticTools(deps.db, box.orgId, unique(synthetic.map((s) => s.synthetic_tool_id)));

  const offered: OfferedTool[] = [];
  const taken = new Set<string>();
  const offer = (tool: Omit<OfferedTool, 'verdict'>, ref: ToolRef) => {
    if (taken.has(tool.name)) return;
    const verdict = policy.evaluate(ref);
    if (!verdict.listed) return;
    taken.add(tool.name);
    offered.push({ ...tool, verdict });
  };
  for (const source of box.sources) {
    if (source.type === 'synthetic_tool') {
      const row = syntheticRows.get(source.synthetic_tool_id);
      if (!row) continue;
      const steps = stepToolsOf(row.steps as SyntheticToolStep[]);
      offer(
        {
          name: row.name,
          title: null,
          description: row.description,
          input_schema: row.input_schema as ConnectionTool['input_schema'],
          output_schema: (row.output_schema ?? null) as ConnectionTool['output_schema'],
          annotations: null,
          source: { kind: 'synthetic', synthetic_tool_id: row.id, steps },
        },
        { kind: 'synthetic', id: row.id, steps },
      );
      continue;
    }
    if (!source.serves) continue;
    const tools = (caches.get(source.connection_id) ?? []) as ConnectionTool[];
    const wanted = source.tools === 'all' ? null : new Set(source.tools);
    for (const tool of tools) {
      if (wanted && !wanted.has(tool.name)) continue;
      offer(
        {
          name: `${source.connector_slug}__${tool.name}`,
          title: tool.title ?? null,
          description: tool.description ?? null,
          input_schema: tool.input_schema ?? EMPTY_INPUT,
          output_schema: tool.output_schema ?? null,
          annotations: tool.annotations ?? null,
          source: { kind: 'upstream', connection_id: source.connection_id, connector_slug: source.connector_slug, tool: tool.name },
        },
        { kind: 'upstream', connector_slug: source.connector_slug, tool: tool.name },
      );
    }
  }
  return offered;
}
