/**
 * The part of the policy (src/policy/restrictions.ts, issue 10's policy branch) that the
 * tools of a user toolbox are filtered by, as the brief fixes it: `Policy` satisfies
 * `ToolPolicy`. Kept as an interface here so that this area does not depend on how the
 * policy is loaded; once that branch is merged these types are re-exported from it.
 */
export type ToolRef =
  | { kind: 'upstream'; connector_slug: string; tool: string }
  | { kind: 'synthetic'; id: string; steps: readonly { connector_slug: string; tool: string }[] };

export interface Verdict {
  /** false when a `deny` matches. */
  listed: boolean;
  /** false when denied, or held by a require_approval without a live exception. */
  callable: boolean;
  deniedBy: string[];
  heldBy: string[];
}

export interface ToolPolicy {
  evaluate(tool: ToolRef): Verdict;
}
