/**
 * The part of the policy (src/policy/restrictions.ts) that the tools of a user toolbox are
 * filtered by: `Policy` satisfies `ToolPolicy` (only `evaluate` is used here, so this area
 * does not depend on how a policy is loaded).
 */
import type { Policy, ToolRef, Verdict } from '../../access/policy';

export type { ToolRef, Verdict };
export type ToolPolicy = Pick<Policy, 'evaluate'>;
