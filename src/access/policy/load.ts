// Reads what a Policy is made of: the member's roles and teams, the active restrictions that
// apply to them and their live exceptions. Evaluation (evaluate.ts) does no I/O.
import { sql } from 'kysely';
import type { Executor } from '../../db/database';
import { Policy, type PolicySubject } from './evaluate';

/**
 * `load(subjectOf(…))` in one query instead of four in two round trips: the member's roles,
 * teams and live exceptions are read inside the restrictions query (what the MCP endpoint
 * does on every call).
 */
export async function loadPolicyForMember(db: Executor, orgId: string, userId: string, now: Date): Promise<Policy> {
  type ExceptionRow = {
    restriction_id: string;
    connector_slug: string | null;
    tool_name: string | null;
    synthetic_tool_id: string | null;
    exception_connector_slug: string | null;
    exception_tool_pattern: string | null;
  };
  const result = await sql<{
    role_ids: string[];
    team_ids: string[];
    exceptions: ExceptionRow[] | string;
    exceptions_end: Date | string | null;
    id: string | null;
    effect: 'deny' | 'require_approval';
    match_connector_slug: string | null;
    match_tool_pattern: string | null;
    match_synthetic_tool_id: string | null;
  }>`
    with subject as (
      select
        coalesce((select array_agg(ra.role_id order by ra.role_id) from role_assignments ra where ra.org_id = ${orgId} and ra.user_id = ${userId}), '{}'::text[]) as role_ids,
        coalesce((select array_agg(tm.team_id order by tm.team_id) from team_members tm where tm.org_id = ${orgId} and tm.user_id = ${userId}), '{}'::text[]) as team_ids,
        coalesce((
          select json_agg(json_build_object(
            'restriction_id', ar.restriction_id, 'connector_slug', ar.connector_slug, 'tool_name', ar.tool_name, 'synthetic_tool_id', ar.synthetic_tool_id,
            'exception_connector_slug', ar.exception_connector_slug, 'exception_tool_pattern', ar.exception_tool_pattern))
          from access_requests ar
          where ar.org_id = ${orgId} and ar.requester_user_id = ${userId} and ar.status = 'approved'
            and (ar.exception_expires_at is null or ar.exception_expires_at > ${now})
        ), '[]'::json) as exceptions,
        (
          select min(ar.exception_expires_at) from access_requests ar
          where ar.org_id = ${orgId} and ar.requester_user_id = ${userId} and ar.status = 'approved' and ar.exception_expires_at > ${now}
        ) as exceptions_end
    )
    select s.role_ids, s.team_ids, s.exceptions, s.exceptions_end, r.id, r.effect, r.match_connector_slug, r.match_tool_pattern, r.match_synthetic_tool_id
    from subject s
    left join restrictions r on r.org_id = ${orgId} and r.is_active = true and (
      r.applies_to_everyone = true or r.applies_to_user_ids @> array[${userId}]::text[]
      or r.applies_to_role_ids && s.role_ids or r.applies_to_team_ids && s.team_ids
    )
    order by r.id`.execute(db);
  const first = result.rows[0];
  const subject: PolicySubject = { orgId, userId, roleIds: first?.role_ids ?? [], teamIds: first?.team_ids ?? [] };
  const raw = first?.exceptions ?? [];
  const exceptions = (typeof raw === 'string' ? JSON.parse(raw) : raw) as ExceptionRow[];
  const rows = result.rows.filter((r): r is typeof r & { id: string } => r.id !== null);
  const end = first?.exceptions_end ?? null;
  return Policy.compiled(subject, rows, exceptions, end === null ? null : new Date(end));
}

function exceptionsOf(db: Executor, orgId: string, userId: string, now: Date) {
  return db
    .selectFrom('access_requests')
    .select(['restriction_id', 'connector_slug', 'tool_name', 'synthetic_tool_id', 'exception_connector_slug', 'exception_tool_pattern'])
    .where('org_id', '=', orgId)
    .where('requester_user_id', '=', userId)
    .where('status', '=', 'approved')
    .where((eb) => eb.or([eb('exception_expires_at', 'is', null), eb('exception_expires_at', '>', now)]))
    .execute();
}

/** Active restrictions applying to the subject, and its live exceptions (approved, unexpired access requests), in two queries. */
export async function loadPolicy(db: Executor, subject: PolicySubject, now: Date): Promise<Policy> {
  const roleIds = [...subject.roleIds];
  const teamIds = [...subject.teamIds];
  const [rows, exceptions] = await Promise.all([
    db
      .selectFrom('restrictions')
      .select(['id', 'effect', 'match_connector_slug', 'match_tool_pattern', 'match_synthetic_tool_id'])
      .where('org_id', '=', subject.orgId)
      .where('is_active', '=', true)
      .where((eb) =>
        eb.or([
          eb('applies_to_everyone', '=', true),
          eb(sql<boolean>`applies_to_user_ids @> array[${subject.userId}]::text[]`, '=', true),
          ...(roleIds.length > 0 ? [eb(sql<boolean>`applies_to_role_ids && ${sql.val(roleIds)}::text[]`, '=', true)] : []),
          ...(teamIds.length > 0 ? [eb(sql<boolean>`applies_to_team_ids && ${sql.val(teamIds)}::text[]`, '=', true)] : []),
        ]),
      )
      .orderBy('id')
      .execute(),
    exceptionsOf(db, subject.orgId, subject.userId, now),
  ]);
  return Policy.compiled(subject, rows, exceptions);
}

/** The member's roles and teams in the organization. */
export async function policySubjectOf(db: Executor, orgId: string, userId: string): Promise<PolicySubject> {
  const [roles, teams] = await Promise.all([
    db.selectFrom('role_assignments').select('role_id').where('org_id', '=', orgId).where('user_id', '=', userId).execute(),
    db.selectFrom('team_members').select('team_id').where('org_id', '=', orgId).where('user_id', '=', userId).execute(),
  ]);
  return { orgId, userId, roleIds: roles.map((r) => r.role_id), teamIds: teams.map((t) => t.team_id) };
}
