import type { Executor } from '../../db/database';

/**
 * INTERIM: the interface of src/policy/restrictions.ts (the policy branch, i10-policy), with a
 * small implementation so that synthetic tools can be built and tested before it lands. Once
 * i10-policy is merged, the synthetic-tools area imports `Policy` from there and this file goes.
 */
export interface PolicySubject { orgId: string; userId: string; roleIds: readonly string[]; teamIds: readonly string[] }
export type ToolRef =
  | { kind: 'upstream'; connector_slug: string; tool: string }
  | { kind: 'synthetic'; id: string; steps: readonly { connector_slug: string; tool: string }[] };
export interface Verdict { listed: boolean; callable: boolean; deniedBy: string[]; heldBy: string[] }

interface Rule { id: string; effect: 'deny' | 'require_approval'; slug: string | null; pattern: RegExp | null; syntheticId: string | null }
interface Exception { restrictionId: string; slug: string | null; tool: string | null; syntheticId: string | null }

function glob(pattern: string): RegExp {
  const body = pattern.replace(/[.+^${}()|[\]\\-]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  return new RegExp(`^${body}$`, 'su');
}

export class Policy {
  private constructor(private readonly rules: Rule[], private readonly exceptions: Exception[]) {}

  static async subjectOf(db: Executor, orgId: string, userId: string): Promise<PolicySubject> {
    const roles = await db.selectFrom('role_assignments').select('role_id').where('org_id', '=', orgId).where('user_id', '=', userId).execute();
    const teams = await db.selectFrom('team_members').select('team_id').where('org_id', '=', orgId).where('user_id', '=', userId).execute();
    return { orgId, userId, roleIds: roles.map((r) => r.role_id), teamIds: teams.map((t) => t.team_id) };
  }

  static async load(db: Executor, subject: PolicySubject, now: Date): Promise<Policy> {
    const rows = await db.selectFrom('restrictions').selectAll().where('org_id', '=', subject.orgId).where('is_active', '=', true).execute();
    const applies = (r: (typeof rows)[number]) =>
      r.applies_to_everyone ||
      r.applies_to_user_ids.includes(subject.userId) ||
      r.applies_to_role_ids.some((id) => subject.roleIds.includes(id)) ||
      r.applies_to_team_ids.some((id) => subject.teamIds.includes(id));
    const rules = rows.filter(applies).map((r) => ({
      id: r.id, effect: r.effect, slug: r.match_connector_slug, pattern: r.match_tool_pattern ? glob(r.match_tool_pattern) : null, syntheticId: r.match_synthetic_tool_id,
    }));
    const approved = await db
      .selectFrom('access_requests')
      .select(['restriction_id', 'connector_slug', 'tool_name', 'synthetic_tool_id', 'exception_expires_at'])
      .where('org_id', '=', subject.orgId)
      .where('requester_user_id', '=', subject.userId)
      .where('status', '=', 'approved')
      .execute();
    const exceptions = approved
      .filter((a) => a.exception_expires_at === null || new Date(a.exception_expires_at as unknown as string) > now)
      .map((a) => ({ restrictionId: a.restriction_id, slug: a.connector_slug, tool: a.tool_name, syntheticId: a.synthetic_tool_id }));
    return new Policy(rules, exceptions);
  }

  evaluate(tool: ToolRef): Verdict {
    const deniedBy = new Set<string>();
    const heldBy = new Set<string>();
    const consider = (rule: Rule, excepted: boolean) => {
      if (rule.effect === 'deny') deniedBy.add(rule.id);
      else if (!excepted) heldBy.add(rule.id);
    };
    const upstream = (slug: string, name: string) => {
      for (const rule of this.rules) {
        if (rule.syntheticId !== null) continue;
        if (rule.slug !== null && rule.slug !== slug) continue;
        if (rule.pattern !== null && !rule.pattern.test(name)) continue;
        const excepted = this.exceptions.some((e) => e.restrictionId === rule.id && (e.slug === null || e.slug === slug) && (e.tool === null || e.tool === name));
        consider(rule, excepted);
      }
    };
    if (tool.kind === 'upstream') upstream(tool.connector_slug, tool.tool);
    else {
      for (const step of tool.steps) upstream(step.connector_slug, step.tool);
      for (const rule of this.rules) {
        if (rule.syntheticId !== tool.id) continue;
        consider(rule, this.exceptions.some((e) => e.restrictionId === rule.id));
      }
    }
    const denied = [...deniedBy];
    return { listed: denied.length === 0, callable: denied.length === 0 && heldBy.size === 0, deniedBy: denied, heldBy: [...heldBy] };
  }
}
