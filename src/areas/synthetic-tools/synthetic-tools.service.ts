import { requireFeature, requireWithinLimit } from '../../access/entitlements';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError, type ValidationProblem } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { lookup, resolveConnector } from '../connectors';
import { checkValue, type MappingProblem } from './mapping';
import { schemaProblems } from './schemas';
import * as repo from './synthetic-tools.repo';
import type { SyntheticTool, SyntheticToolCreate, SyntheticToolStep, SyntheticToolStepInput, SyntheticToolUpdate } from './synthetic-tools.types';

const WHAT = 'synthetic tool';
const NAME_KEY = 'synthetic_tools_org_id_name_key';

/** The upstream tools a synthetic tool's steps call, in step order (restrictions match a synthetic tool through them). */
export function stepToolsOf(steps: SyntheticToolStep[]): { connector_slug: string; tool: string }[] {
  return steps.map((step) => ({ connector_slug: step.tool.connector_slug, tool: step.tool.name }));
}

/** The connectors a synthetic tool's steps use, each once, in step order. */
export function connectorSlugsOf(steps: SyntheticToolStep[]): string[] {
  return [...new Set(steps.map((s) => s.tool.connector_slug))];
}

export function toSyntheticTool(row: repo.SyntheticToolRow): SyntheticTool {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    input_schema: row.input_schema as SyntheticTool['input_schema'],
    output_schema: row.output_schema as SyntheticTool['output_schema'],
    steps: row.steps,
    output: row.output as SyntheticTool['output'],
    connector_slugs: connectorSlugsOf(row.steps),
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

function normalizeSteps(steps: SyntheticToolStepInput[]): SyntheticToolStep[] {
  return steps.map((s) => ({
    id: s.id,
    tool: { connector_slug: s.tool.connector_slug, connection_id: s.tool.connection_id ?? null, name: s.tool.name },
    arguments: s.arguments ?? {},
    on_error: s.on_error ?? 'fail',
  }));
}

/** The members an update may change, as its audit entry compares them; the large ones by digest. */
const LARGE_MEMBERS = ['input_schema', 'output_schema', 'steps', 'output'];
function auditedMembers(row: repo.SyntheticToolRow): Record<string, unknown> {
  const { name, description, input_schema, output_schema, steps, output } = toSyntheticTool(row);
  return { name, description, input_schema, output_schema, steps, output };
}

const body = (p: MappingProblem): ValidationProblem => ({ in: 'body', pointer: p.pointer, message: p.message });

/** The data-only checks: schemas, step ids, mappings (steps refer only to earlier steps, the output to any). */
function definitionProblems(
  def: { input_schema?: unknown; output_schema?: unknown; steps?: SyntheticToolStep[]; output?: unknown },
  allSteps: SyntheticToolStep[],
): MappingProblem[] {
  const problems: MappingProblem[] = [];
  if (def.input_schema !== undefined) problems.push(...schemaProblems(def.input_schema, '/input_schema'));
  if (def.output_schema !== undefined && def.output_schema !== null) problems.push(...schemaProblems(def.output_schema, '/output_schema'));
  if (def.steps) {
    const earlier = new Set<string>();
    def.steps.forEach((step, i) => {
      if (earlier.has(step.id)) problems.push({ pointer: `/steps/${i}/id`, message: `repeats the id "${step.id}" of an earlier step` });
      for (const [name, value] of Object.entries(step.arguments)) {
        checkValue(value, `/steps/${i}/arguments/${name.replace(/~/g, '~0').replace(/\//g, '~1')}`, earlier, 'an earlier step', problems);
      }
      earlier.add(step.id);
    });
  }
  if (def.output !== undefined) checkValue(def.output, '/output', new Set(allSteps.map((s) => s.id)), 'a step of this tool', problems);
  return problems;
}

/**
 * The references of the steps: each connector is one the caller sees in the organization
 * (else unknown_reference), declares the tool (else validation_failed), and a pinned
 * connection is of that connector and one the caller may pin: their own, or any member's
 * with `connection:manage` (else unknown_reference). A connector that declares no tools (its
 * tools are discovered from the upstream) is checked against the tools its connections in
 * the organization last listed (the pinned connection's, when pinned); when none has listed
 * any yet, the name is accepted and the upstream decides when the tool runs.
 */
async function referenceProblems(ctx: RequestContext, steps: SyntheticToolStep[]): Promise<{ unknown: MappingProblem[]; invalid: MappingProblem[] }> {
  const unknown: MappingProblem[] = [];
  const invalid: MappingProblem[] = [];
  const seesAll = ctx.org?.permissions.has('connector:manage') ?? false;
  const pinsAny = ctx.org?.permissions.has('connection:manage') ?? false;
  const pinned = await repo.connectionsByIds(ctx.db, ctx.orgId, [...new Set(steps.map((s) => s.tool.connection_id).filter((id): id is string => id !== null))]);
  const declared = new Map<string, string[] | null>();
  for (const [i, step] of steps.entries()) {
    const { connector_slug: slug, connection_id: connectionId, name } = step.tool;
    if (!declared.has(slug)) {
      const visible = await resolveConnector(ctx.db, ctx.deps.secrets, ctx.orgId, ctx.user, seesAll, slug);
      const found = visible ? await lookup(ctx.db, ctx.orgId, slug) : null;
      declared.set(slug, found ? (found.source === 'custom' ? found.row.content.tools : found.content.tools).map((t) => t.name) : null);
    }
    const tools = declared.get(slug);
    if (tools === null || tools === undefined) {
      unknown.push({ pointer: `/steps/${i}/tool/connector_slug`, message: 'names no connector of this organization that you can see' });
      continue;
    }
    if (connectionId !== null) {
      const connection = pinned.find((c) => c.id === connectionId);
      if (!connection || (connection.owner_user_id !== ctx.user && !pinsAny)) {
        unknown.push({
          pointer: `/steps/${i}/tool/connection_id`,
          message: "names no connection you may pin (your own, or any member's with connection:manage)",
        });
        continue;
      }
      if (connection.connector_slug !== slug) {
        invalid.push({ pointer: `/steps/${i}/tool/connection_id`, message: `is a connection of ${connection.connector_slug}, not of ${slug}` });
        continue;
      }
    }
    const known = tools.length > 0 ? new Set(tools) : await repo.cachedToolNames(ctx.db, ctx.orgId, slug, connectionId);
    if (known.size > 0 && !known.has(name)) {
      invalid.push({
        pointer: `/steps/${i}/tool/name`,
        message: `is not a tool of ${slug}${tools.length > 0 ? '' : ' (as its connections last listed them)'}`,
      });
    }
  }
  return { unknown, invalid };
}

/** Answers the problems found, the references first: 400 unknown_reference or validation_failed. */
async function check(
  ctx: RequestContext,
  def: { input_schema?: unknown; output_schema?: unknown; steps?: SyntheticToolStep[]; output?: unknown },
  allSteps: SyntheticToolStep[],
) {
  const problems = definitionProblems(def, allSteps);
  if (problems.length > 0) throw validationError(problems.map(body));
  if (!def.steps) return;
  const { unknown, invalid } = await referenceProblems(ctx, def.steps);
  if (unknown.length > 0) {
    throw new ApiError('unknown_reference', 'A step names a connector or connection that does not exist or that you cannot use here; see errors.', {
      errors: unknown.map(body),
    });
  }
  if (invalid.length > 0) throw validationError(invalid.map(body));
}

function nameTaken(name: string) {
  return new ApiError('name_taken', `Another synthetic tool of this organization is named ${name}.`);
}

// ---------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------

export async function list(
  ctx: RequestContext,
  page: PageRequest,
  filter: { connector_slug?: string; created_by_user_id?: string },
): Promise<Page<SyntheticTool>> {
  const problems: ValidationProblem[] = [];
  if (filter.connector_slug !== undefined) {
    const seesAll = ctx.org?.permissions.has('connector:manage') ?? false;
    if (!(await resolveConnector(ctx.db, ctx.deps.secrets, ctx.orgId, ctx.user, seesAll, filter.connector_slug))) {
      problems.push({ in: 'query', pointer: '/connector_slug', message: 'names no connector you can see' });
    }
  }
  if (filter.created_by_user_id !== undefined) {
    const member = await ctx.db
      .selectFrom('memberships')
      .select('user_id')
      .where('org_id', '=', ctx.orgId)
      .where('user_id', '=', filter.created_by_user_id)
      .executeTakeFirst();
    if (!member) problems.push({ in: 'query', pointer: '/created_by_user_id', message: 'is not a member of this organization' });
  }
  if (problems.length > 0)
    throw new ApiError('unknown_reference', 'A filter names something that does not exist or that you cannot see.', { errors: problems });
  const rows = await repo.listSyntheticTools(ctx.db, ctx.orgId, page, filter);
  return toPage(rows, page, toSyntheticTool);
}

export async function get(ctx: RequestContext, id: string): Promise<SyntheticTool> {
  const row = await repo.findSyntheticTool(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return toSyntheticTool(row);
}

export async function create(ctx: RequestContext, input: SyntheticToolCreate): Promise<SyntheticTool> {
  await requireFeature(ctx.db, ctx.orgId, 'synthetic_tools');
  const steps = normalizeSteps(input.steps);
  const output = input.output !== undefined ? input.output : { $step: steps[steps.length - 1]?.id ?? '' };
  await check(ctx, { input_schema: input.input_schema, output_schema: input.output_schema ?? null, steps, output }, steps);
  await requireWithinLimit(ctx.db, ctx.orgId, 'synthetic_tools', () => repo.countSyntheticTools(ctx.db, ctx.orgId));
  return conflictOnUnique(
    NAME_KEY,
    () => nameTaken(input.name),
    () =>
      ctx.write(async (w) => {
        await requireWithinLimit(w.db, ctx.orgId, 'synthetic_tools', () => repo.countSyntheticTools(w.db, ctx.orgId));
        const row = await repo.insertSyntheticTool(w.db, {
          id: newId('syntheticTool'),
          org_id: ctx.orgId,
          name: input.name,
          description: input.description,
          input_schema: JSON.stringify(input.input_schema),
          output_schema: input.output_schema ? JSON.stringify(input.output_schema) : null,
          steps: JSON.stringify(steps),
          output: JSON.stringify(output),
          created_by_user_id: ctx.user,
        });
        w.audit({ targetId: row.id, changes: { name: row.name, connector_slugs: connectorSlugsOf(steps), steps: steps.map((s) => s.id) } });
        return toSyntheticTool(row);
      }),
  );
}

export async function update(ctx: RequestContext, id: string, input: SyntheticToolUpdate): Promise<SyntheticTool> {
  const current = await repo.findSyntheticTool(ctx.db, ctx.orgId, id);
  if (!current) throw notFound(WHAT, id);
  const steps = input.steps ? normalizeSteps(input.steps) : undefined;
  // A kept output must still refer only to the steps there will be.
  const output = input.output !== undefined ? input.output : steps ? current.output : undefined;
  await check(ctx, { input_schema: input.input_schema, output_schema: input.output_schema, steps, output }, steps ?? current.steps);
  return conflictOnUnique(
    NAME_KEY,
    () => nameTaken(input.name ?? current.name),
    () =>
      ctx.write(async (w) => {
        const locked = await repo.findSyntheticTool(w.db, ctx.orgId, id, true);
        if (!locked) throw notFound(WHAT, id);
        const row = await repo.updateSyntheticTool(w.db, ctx.orgId, id, {
          ...(input.name !== undefined ? { name: input.name } : {}),
          ...(input.description !== undefined ? { description: input.description } : {}),
          ...(input.input_schema !== undefined ? { input_schema: JSON.stringify(input.input_schema) } : {}),
          ...(input.output_schema !== undefined ? { output_schema: input.output_schema === null ? null : JSON.stringify(input.output_schema) } : {}),
          ...(steps ? { steps: JSON.stringify(steps) } : {}),
          ...(input.output !== undefined ? { output: JSON.stringify(input.output) } : {}),
        });
        if (!row) throw notFound(WHAT, id);
        w.audit({ targetId: id, changes: changedMembers(auditedMembers(locked), auditedMembers(row), { digests: LARGE_MEMBERS }) });
        return toSyntheticTool(row);
      }),
  );
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await repo.findSyntheticTool(w.db, ctx.orgId, id, true);
    if (!row) throw notFound(WHAT, id);
    const { toolboxes, restrictions } = await repo.usesOf(w.db, ctx.orgId, id);
    if (toolboxes.length > 0 || restrictions.length > 0) {
      const named = [
        ...(toolboxes.length > 0 ? [`listed by toolbox${toolboxes.length > 1 ? 'es' : ''} ${toolboxes.map((t) => `${t.name} (${t.id})`).join(', ')}`] : []),
        ...(restrictions.length > 0
          ? [`named by restriction${restrictions.length > 1 ? 's' : ''} ${restrictions.map((r) => `${r.name} (${r.id})`).join(', ')}`]
          : []),
      ];
      throw new ApiError(
        'conflict',
        `Synthetic tool ${id} is ${named.join(' and ')}; remove it from those toolboxes and change or delete those restrictions first.`,
      );
    }
    await repo.deleteSyntheticTool(w.db, ctx.orgId, id);
    w.audit({ targetId: id, changes: { name: row.name } });
  });
}
