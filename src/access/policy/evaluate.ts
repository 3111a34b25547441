// The one evaluation of restrictions (spec/schemas/restrictions.yml, RestrictionEffect):
// which tools a member sees (`listed`), may call (`callable`), and which restrictions hold
// them back. Loaded once per listing or call (two queries), then evaluated per tool with no
// I/O. Tool listings (user toolboxes, MCP), synthetic tool runs and their execute endpoint
// all go through `Policy.evaluate`. Pure: no I/O here (load.ts reads restrictions from the
// database); the lint keeps it so.
import { compileGlob, type GlobMatcher } from './glob';

export interface PolicySubject {
  orgId: string;
  userId: string;
  roleIds: readonly string[];
  teamIds: readonly string[];
}

export type ToolRef =
  { kind: 'upstream'; connector_slug: string; tool: string } | { kind: 'synthetic'; id: string; steps: readonly { connector_slug: string; tool: string }[] };

export interface Verdict {
  /** False when a `deny` matches. */
  listed: boolean;
  /** False when denied, or held by a require_approval without a live exception. */
  callable: boolean;
  /** The `deny` restrictions that match (ids, oldest first). */
  deniedBy: string[];
  /** The `require_approval` restrictions that match and that no live exception covers (to file against). */
  heldBy: string[];
}

/** An approved, unexpired access request: an exception to one restriction, for what it asked. */
interface Exception {
  /** Null: every connector the restriction matches. */
  connector_slug: string | null;
  /** Null: every tool (on `connector_slug` when set). */
  tool_name: string | null;
  /** Set for a restriction on a synthetic tool: the exception covers that tool. */
  synthetic_tool_id: string | null;
  /** The connector it was approved for (the restriction's then, unless the request named one); null: no bound. */
  exception_connector_slug?: string | null;
  /** The tools it was approved for (the restriction's pattern then, unless the request named one); null: no bound. */
  exception_tool_pattern?: string | null;
}

/** An exception as evaluated: its approved tool pattern compiled once. */
interface CompiledException {
  connectorSlug: string | null;
  toolName: string | null;
  syntheticToolId: string | null;
  approvedConnectorSlug: string | null;
  approvedTools: GlobMatcher | null;
}

const compileException = (e: Exception): CompiledException => ({
  connectorSlug: e.connector_slug,
  toolName: e.tool_name,
  syntheticToolId: e.synthetic_tool_id,
  approvedConnectorSlug: e.exception_connector_slug ?? null,
  approvedTools: e.exception_tool_pattern == null ? null : compileGlob(e.exception_tool_pattern),
});

interface CompiledRestriction {
  id: string;
  effect: 'deny' | 'require_approval';
  /** Upstream match (null members match everything); unused when `syntheticToolId` is set. */
  connectorSlug: string | null;
  tool: GlobMatcher | null;
  syntheticToolId: string | null;
  exceptions: CompiledException[];
}

export class Policy {
  /** Upstream restrictions naming a connector, by its slug. */
  private readonly bySlug = new Map<string, CompiledRestriction[]>();
  /** Upstream restrictions on any connector. */
  private readonly anySlug: CompiledRestriction[] = [];
  /** Restrictions naming a synthetic tool, by its id. */
  private readonly bySynthetic = new Map<string, CompiledRestriction[]>();

  private constructor(
    readonly subject: PolicySubject,
    private readonly restrictions: readonly CompiledRestriction[],
    /**
     * When the verdicts change with time alone: the first live exception's expiry (null: none
     * expires). Whoever keeps a policy longer than a request forgets it then. Known to policies
     * from loadForMember; others say null.
     */
    readonly changesAt: Date | null = null,
  ) {
    for (const r of restrictions) {
      if (r.syntheticToolId !== null) push(this.bySynthetic, r.syntheticToolId, r);
      else if (r.connectorSlug !== null) push(this.bySlug, r.connectorSlug, r);
      else this.anySlug.push(r);
    }
  }

  /** A policy from restriction rows and exception rows as the database holds them. */
  static compiled(
    subject: PolicySubject,
    rows: readonly {
      id: string;
      effect: 'deny' | 'require_approval';
      match_connector_slug: string | null;
      match_tool_pattern: string | null;
      match_synthetic_tool_id: string | null;
    }[],
    exceptions: readonly (Exception & { restriction_id: string })[],
    changesAt: Date | null = null,
  ): Policy {
    const byRestriction = new Map<string, CompiledException[]>();
    for (const e of exceptions) push(byRestriction, e.restriction_id, compileException(e));
    return new Policy(
      subject,
      rows.map((r) => ({
        id: r.id,
        effect: r.effect,
        connectorSlug: r.match_connector_slug,
        tool: r.match_tool_pattern === null ? null : compileGlob(r.match_tool_pattern),
        syntheticToolId: r.match_synthetic_tool_id,
        exceptions: byRestriction.get(r.id) ?? [],
      })),
      changesAt,
    );
  }

  /** A policy with the given restrictions and no database (tests, benches). */
  static of(subject: PolicySubject, restrictions: readonly PolicyRestrictionInput[]): Policy {
    return new Policy(
      subject,
      [...restrictions]
        .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
        .map((r) => ({
          id: r.id,
          effect: r.effect,
          connectorSlug: r.connector_slug,
          tool: r.tool_pattern === null ? null : compileGlob(r.tool_pattern),
          syntheticToolId: r.synthetic_tool_id,
          exceptions: (r.exceptions ?? []).map(compileException),
        })),
    );
  }

  /** The ids of the loaded restrictions (active, applying to the subject). */
  get restrictionIds(): string[] {
    return this.restrictions.map((r) => r.id);
  }

  evaluate(tool: ToolRef): Verdict {
    const deniedBy: string[] = [];
    const heldBy: string[] = [];
    // Only the restrictions that could match: those of the tool's connector(s), those on any
    // connector, and (for a synthetic tool) those naming it; judged in id order (oldest first).
    let candidates: CompiledRestriction[];
    if (tool.kind === 'upstream') {
      const own = this.bySlug.get(tool.connector_slug);
      candidates = own === undefined ? this.anySlug : this.anySlug.length === 0 ? own : mergeById(own, this.anySlug);
    } else {
      const set = new Set<CompiledRestriction>(this.bySynthetic.get(tool.id));
      for (const r of this.anySlug) set.add(r);
      for (const step of tool.steps) for (const r of this.bySlug.get(step.connector_slug) ?? []) set.add(r);
      candidates = [...set].sort(byId);
    }
    for (const r of candidates) {
      if (r.effect === 'deny') {
        if (matches(r, tool)) deniedBy.push(r.id);
      } else if (held(r, tool)) {
        heldBy.push(r.id);
      }
    }
    const listed = deniedBy.length === 0;
    return { listed, callable: listed && heldBy.length === 0, deniedBy, heldBy };
  }
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

const byId = (a: CompiledRestriction, b: CompiledRestriction) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** Two lists already in id order, merged in id order. */
function mergeById(a: readonly CompiledRestriction[], b: readonly CompiledRestriction[]): CompiledRestriction[] {
  const out: CompiledRestriction[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length)
    out.push(byId(a[i] as CompiledRestriction, b[j] as CompiledRestriction) <= 0 ? (a[i++] as CompiledRestriction) : (b[j++] as CompiledRestriction));
  while (i < a.length) out.push(a[i++] as CompiledRestriction);
  while (j < b.length) out.push(b[j++] as CompiledRestriction);
  return out;
}

export interface PolicyRestrictionInput {
  id: string;
  effect: 'deny' | 'require_approval';
  connector_slug: string | null;
  tool_pattern: string | null;
  synthetic_tool_id: string | null;
  exceptions?: Exception[];
}

function matchesUpstream(r: CompiledRestriction, connectorSlug: string, tool: string): boolean {
  if (r.syntheticToolId !== null) return false;
  if (r.connectorSlug !== null && r.connectorSlug !== connectorSlug) return false;
  return r.tool === null || r.tool(tool);
}

function matches(r: CompiledRestriction, tool: ToolRef): boolean {
  if (tool.kind === 'upstream') return matchesUpstream(r, tool.connector_slug, tool.tool);
  if (r.syntheticToolId !== null) return r.syntheticToolId === tool.id;
  return tool.steps.some((s) => matchesUpstream(r, s.connector_slug, s.tool));
}

/**
 * An exception of `r` covering the upstream tool: what the request named, within what it was
 * approved for (so a restriction broadened since does not widen it).
 */
function coversUpstream(r: CompiledRestriction, connectorSlug: string, tool: string): boolean {
  return r.exceptions.some(
    (e) =>
      e.syntheticToolId === null &&
      (e.connectorSlug === null || e.connectorSlug === connectorSlug) &&
      (e.approvedConnectorSlug === null || e.approvedConnectorSlug === connectorSlug) &&
      (e.toolName === null || e.toolName === tool) &&
      (e.approvedTools === null || e.approvedTools(tool)),
  );
}

/**
 * Whether a require_approval restriction holds the tool back: it matches, and no live
 * exception covers it. A synthetic tool matched through its steps is held while any step
 * the restriction matches is not covered (an exception for the whole restriction, the
 * step's connector or the step's tool lets it through); one named by id, unless an
 * exception of the restriction was asked for that tool (it covers just that tool; one granted
 * while the restriction matched upstream tools does not).
 */
function held(r: CompiledRestriction, tool: ToolRef): boolean {
  if (tool.kind === 'upstream') {
    return matchesUpstream(r, tool.connector_slug, tool.tool) && !coversUpstream(r, tool.connector_slug, tool.tool);
  }
  if (r.syntheticToolId !== null) {
    return r.syntheticToolId === tool.id && !r.exceptions.some((e) => e.syntheticToolId === r.syntheticToolId);
  }
  return tool.steps.some((s) => matchesUpstream(r, s.connector_slug, s.tool) && !coversUpstream(r, s.connector_slug, s.tool));
}
