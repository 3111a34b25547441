import type { Logger } from 'pino';
import { appendEvents } from '../../events/outbox';
import { WriteScope, type AppDeps, type RequestContext } from '../../http/context';
import { ApiError, notFound, type ValidationProblem } from '../../http/errors';
import { invokeTool } from '../../mcp/invoke';
import type { UpstreamCallResult } from '../../mcp/upstream/client';
import { ConnectionRow, findConnection } from '../connections';
import type { ConnectionContext } from '../../mcp/upstream/credentials';
import { resolveConnector, seesConnector, type ResolvedConnector } from '../connectors';
import { evaluate, MappingError, type Json } from './mapping';
import { loadPolicy, policySubjectOf } from '../../access/policy';
import type { ValidateFunction } from 'ajv/dist/2020';
import { MAX_PATTERN_WORK, PatternWorkExceeded, problemsOf, runValidator, SchemaTooComplex, validatorFor } from './schemas';
import * as repo from './synthetic-tools.repo';
import { stepToolsOf } from './synthetic-tools.service';
import type { Binding, SyntheticToolExecuteRequest, SyntheticToolExecution, SyntheticToolStepRun } from './synthetic-tools.types';

/**
 * Runs a synthetic tool as a member: arguments checked against `input_schema` (defaults
 * applied), then the restrictions (Policy), then a usable connection for every step; then the
 * steps one after the other through those connections' own credentials, each under the step
 * deadline and all under the run's, stopping at the first failing step (`on_error: fail`).
 */

export interface RunOptions {
  /** Which of the caller's own connections serve the connectors of steps without a pinned connection. */
  bindings?: readonly Binding[];
  /**
   * The request's context, when the run serves one: a connection whose credentials the
   * upstream refuses becomes `needs_reauth` through its systemWrite (the operation declares
   * `connection.needs_reauth`). Without it, the runner writes that change itself.
   */
  context?: ConnectionContext;
  log?: Logger;
  /** Hears each step as it ends (the MCP endpoint relays them as `notifications/progress`). */
  onStep?: (done: number, total: number, message: string) => void;
  /**
   * Where the run came in, for the tool-call records of its steps (one per step called,
   * linked by the synthetic tool's id). The synthetic tool's own record is written by the
   * caller, which knows how the run ended (recordSyntheticRun).
   */
  trace?: RunTrace;
}

/** Where a run came in: over MCP (its server and user toolbox, the JSON-RPC id) or through executeSyntheticTool (none of them). */
export interface RunTrace {
  mcpServerId: string | null;
  userToolboxId: string | null;
  requestId: string;
  jsonrpcId: string | null;
}

/** How a refused or broken run is recorded: an upstream out of reach is `unavailable`, any other refusal a `tool_error`. */
export const refusalOutcome = (err: ApiError) => (err.code === 'upstream_unavailable' ? 'unavailable' : 'tool_error');

/**
 * The synthetic tool's own tool-call record of a run, written off the answer's path: the same
 * whether the run came over MCP or through executeSyntheticTool, so that logging destinations
 * see every run.
 */
export function recordSyntheticRun(
  deps: AppDeps,
  trace: RunTrace,
  run: { orgId: string; userId: string; toolId: string; toolName: string; outcome: string; error: string | null; startedMs: number },
): void {
  const now = Date.now();
  deps.mcp.toolCalls.record({
    org_id: run.orgId,
    mcp_server_id: trace.mcpServerId,
    user_id: run.userId,
    user_toolbox_id: trace.userToolboxId,
    connection_id: null,
    connector_slug: null,
    synthetic_tool_id: run.toolId,
    tool_name: run.toolName.slice(0, 512),
    upstream_tool: null,
    outcome: run.outcome,
    error: run.error ? run.error.slice(0, 2000) : null,
    duration_ms: Math.max(0, Math.round(now - run.startedMs)),
    request_id: trace.requestId,
    jsonrpc_id: trace.jsonrpcId,
    created_at: new Date(now),
  });
}

interface Resolved {
  row: ConnectionRow;
  connector: ResolvedConnector;
}

const MAX_ERROR_TEXT = 2000;
const clip = (text: string) => (text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}…` : text);
const unavailable = (detail: string) => new ApiError('connection_unavailable', detail);

/** A context for connections when the run serves no request: its own transaction for the needs_reauth change. */
function standaloneContext(deps: AppDeps, orgId: string): ConnectionContext {
  return {
    deps,
    db: deps.db,
    async systemWrite(change) {
      let count = 0;
      const result = await deps.db.transaction().execute(async (trx) => {
        const scope = new WriteScope(trx, 'runSyntheticTool', ['connection.needs_reauth']);
        const value = await change(scope);
        if (scope.events.length > 0) await appendEvents(trx, orgId, scope.events, { actor_type: 'system', actor_id: null });
        count = scope.events.length;
        return value;
      });
      if (count > 0) deps.afterCommit?.({ scope: orgId, tables: null });
      return result;
    },
  };
}

/** What a step's tool answered, as later references see it: structuredContent, else its text as JSON when it is JSON, else the text. */
export function resultOf(result: UpstreamCallResult): unknown {
  if (result.structuredContent !== undefined && result.structuredContent !== null) return result.structuredContent;
  const text = (result.content ?? [])
    .filter((block): block is { type: 'text'; text: string } => block.type === 'text')
    .map((block) => block.text)
    .join('\n');
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

function errorTextOf(result: UpstreamCallResult): string {
  const text = (result.content ?? [])
    .filter((block): block is { type: 'text'; text: string } => block.type === 'text')
    .map((block) => block.text)
    .join('\n');
  return clip(text || 'The tool answered with an error and no text.');
}

/**
 * The compiled validator of the tool's input or output schema: 409 conflict for a schema
 * saved before schemas were limited in how far their references expand, which no run checks
 * against (its author updates it).
 */
function storedValidator(tool: repo.SyntheticToolRow, which: 'input' | 'output'): ValidateFunction {
  const schema = which === 'input' ? tool.input_schema : (tool.output_schema ?? {});
  try {
    return validatorFor(`${tool.id}:${which}:${tool.updated_at.toISOString()}`, schema, which === 'input');
  } catch (err) {
    if (!(err instanceof SchemaTooComplex)) throw err;
    throw new ApiError(
      'conflict',
      `The ${which}_schema of ${tool.name} cannot be checked: ${err.message} Update the synthetic tool (PATCH /synthetic-tool/${tool.id}) before running it.`,
    );
  }
}

/**
 * The most JSON text a run's arguments may take (256 KiB). Validation and mapping work grow
 * with the arguments; this keeps one call's share of the event loop small whatever the schema.
 */
export const MAX_ARGUMENT_CHARS = 256 * 1024;

/**
 * The arguments, checked against the tool's input schema with its defaults applied: 413
 * payload_too_large past MAX_ARGUMENT_CHARS, 400 invalid_tool_arguments when they do not match
 * or would need more pattern matching than MAX_PATTERN_WORK.
 */
function checkedArguments(tool: repo.SyntheticToolRow, input: unknown): Record<string, unknown> {
  const size = JSON.stringify(input ?? {}).length;
  if (size > MAX_ARGUMENT_CHARS) {
    throw new ApiError(
      'payload_too_large',
      `The arguments of ${tool.name} take ${size} characters of JSON; a synthetic tool takes at most ${MAX_ARGUMENT_CHARS} (256 KiB).`,
    );
  }
  const args = structuredClone(input ?? {}) as Record<string, unknown>;
  const validate = storedValidator(tool, 'input');
  let valid: boolean;
  try {
    valid = runValidator(validate, args);
  } catch (err) {
    if (!(err instanceof PatternWorkExceeded)) throw err;
    throw new ApiError(
      'invalid_tool_arguments',
      `Checking the arguments against the patterns of ${tool.name}'s input schema would take more than the ${MAX_PATTERN_WORK} units a call may use (characters tested times pattern size); send shorter strings.`,
      { errors: [{ in: 'body', pointer: '/arguments', message: 'needs more pattern matching than a call may use' }] },
    );
  }
  if (!valid) {
    const errors: ValidationProblem[] = problemsOf(validate.errors, '/arguments').map((p) => ({ in: 'body', ...p }));
    throw new ApiError(
      'invalid_tool_arguments',
      `The arguments do not match the input schema of ${tool.name} (${errors.length} problem${errors.length === 1 ? '' : 's'}; see errors).`,
      { errors },
    );
  }
  return args;
}

/** 403 tool_restricted when a restriction denies the tool or holds it without an approved exception. */
async function checkPolicy(deps: AppDeps, orgId: string, userId: string, tool: repo.SyntheticToolRow): Promise<void> {
  const policy = await loadPolicy(deps.db, await policySubjectOf(deps.db, orgId, userId), new Date());
  const verdict = policy.evaluate({ kind: 'synthetic', id: tool.id, steps: stepToolsOf(tool.steps) });
  if (verdict.callable) return;
  if (verdict.deniedBy.length > 0) {
    throw new ApiError(
      'tool_restricted',
      `The synthetic tool ${tool.name} is denied to you by restriction ${verdict.deniedBy.join(', ')}; an access request cannot unlock it.`,
    );
  }
  throw new ApiError(
    'tool_restricted',
    `The synthetic tool ${tool.name} is held for approval by restriction ${verdict.heldBy.join(', ')}; file an access request (POST /access-request with restriction_id ${verdict.heldBy[0]}) to ask for it.`,
  );
}

/** The connections of the bindings, checked: of this organization (else unknown_reference), the caller's own and of the connector named. */
async function checkedBindings(deps: AppDeps, orgId: string, userId: string, bindings: readonly Binding[]): Promise<Map<string, string>> {
  const rows = await repo.connectionsByIds(deps.db, orgId, [...new Set(bindings.map((b) => b.connection_id))]);
  const unknown: ValidationProblem[] = [];
  const invalid: ValidationProblem[] = [];
  const bySlug = new Map<string, string>();
  bindings.forEach((binding, i) => {
    const row = rows.find((r) => r.id === binding.connection_id);
    const pointer = `/bindings/${i}/connection_id`;
    if (!row) unknown.push({ in: 'body', pointer, message: 'names no connection of this organization' });
    else if (row.owner_user_id !== userId) invalid.push({ in: 'body', pointer, message: 'is not one of your own connections' });
    else if (row.connector_slug !== binding.connector_slug)
      invalid.push({ in: 'body', pointer, message: `is a connection of ${row.connector_slug}, not of ${binding.connector_slug}` });
    else if (bySlug.has(binding.connector_slug)) invalid.push({ in: 'body', pointer: `/bindings/${i}/connector_slug`, message: 'is bound twice' });
    else bySlug.set(binding.connector_slug, binding.connection_id);
  });
  if (unknown.length > 0)
    throw new ApiError('unknown_reference', 'A binding names a connection that does not exist in this organization.', { errors: unknown });
  if (invalid.length > 0)
    throw new ApiError('validation_failed', `The request has ${invalid.length} problem${invalid.length === 1 ? '' : 's'}; see errors.`, { errors: invalid });
  return bySlug;
}

/** Every step's connection, resolved before the first runs: 409 connection_unavailable naming the connector when one cannot be used. */
async function resolveConnections(deps: AppDeps, orgId: string, userId: string, tool: repo.SyntheticToolRow, bound: Map<string, string>): Promise<Resolved[]> {
  const cache = new Map<string, Resolved>();
  // Someone else's pinned connection: the tools of it the caller reaches through toolboxes.
  const reached = new Map<string, 'all' | Set<string>>();
  const resolved: Resolved[] = [];
  for (const step of tool.steps) {
    const slug = step.tool.connector_slug;
    const pinned = step.tool.connection_id;
    const key = pinned ?? `own:${slug}`;
    let hit = cache.get(key);
    if (!hit) {
      let id = pinned ?? bound.get(slug) ?? null;
      if (!pinned && !id) id = (await repo.ownConnectionOf(deps.db, orgId, userId, slug))?.id ?? null;
      if (!id) throw unavailable(`Step ${step.id} calls ${slug}, and you have no connection to it; connect it first (POST /connection).`);
      const row = await findConnection(deps.db, orgId, id);
      if (!row) throw unavailable(`Step ${step.id} runs through connection ${id} of ${slug}, which no longer exists.`);
      if (pinned && row.owner_user_id !== userId) {
        const tools = await repo.toolsReachedThroughToolboxes(deps.db, orgId, userId, pinned);
        if (tools !== 'all' && tools.size === 0)
          throw unavailable(`Step ${step.id} runs through connection ${pinned} of ${slug}, which is neither yours nor in a toolbox shared with you.`);
        reached.set(key, tools);
      }
      if (row.awaiting_acceptance) {
        throw unavailable(
          `Step ${step.id} runs through connection ${row.id} of ${slug}, which was handed to its owner with another member's credentials and is not accepted yet; its owner must accept it (POST /connection/${row.id}/accept).`,
        );
      }
      if (row.status !== 'active') {
        throw unavailable(
          `Step ${step.id} runs through connection ${row.id} of ${slug}, which is ${row.status}${row.status === 'needs_reauth' || row.status === 'disconnected' ? '; its owner must reconnect it' : ''}.`,
        );
      }
      const connector = (await seesConnector(deps.db, orgId, row.owner_user_id, slug))
        ? await resolveConnector(deps.db, deps.secrets, orgId, row.owner_user_id, true, slug)
        : null;
      if (!connector) throw unavailable(`Step ${step.id} calls ${slug}, which is no longer available to the owner of connection ${row.id}.`);
      hit = { row, connector };
      cache.set(key, hit);
    }
    // A step through someone else's connection calls only what its owner's toolbox entries offer the caller.
    const tools = reached.get(key);
    if (tools !== undefined && tools !== 'all' && !tools.has(step.tool.name)) {
      throw unavailable(
        `Step ${step.id} calls ${step.tool.name} through connection ${hit.row.id} of ${slug}, which is not yours; the toolboxes shared with you offer only ${[...tools].sort().join(', ')} of it.`,
      );
    }
    resolved.push(hit);
  }
  return resolved;
}

/**
 * Runs a synthetic tool as `userId` (the caller's own connections, or the pinned one), for
 * executeSyntheticTool and the MCP endpoint. Checks the arguments (400
 * invalid_tool_arguments), then the policy (403 tool_restricted), then the connections (409
 * connection_unavailable), then runs. A tool's own error is an answer (`is_error: true`); an
 * unreachable upstream under `on_error: fail` is 502 upstream_unavailable.
 */
export async function runSyntheticTool(
  deps: AppDeps,
  orgId: string,
  userId: string,
  tool: repo.SyntheticToolRow,
  input: unknown,
  signal: AbortSignal,
  options: RunOptions = {},
): Promise<SyntheticToolExecution> {
  const args = checkedArguments(tool, input);
  // Compiled before any step runs: a schema that cannot be checked refuses the run, not its end.
  const checkOutput = tool.output_schema ? storedValidator(tool, 'output') : null;
  await checkPolicy(deps, orgId, userId, tool);
  const bound = await checkedBindings(deps, orgId, userId, options.bindings ?? []);
  const connections = await resolveConnections(deps, orgId, userId, tool, bound);
  const ctx = options.context ?? standaloneContext(deps, orgId);
  const { stepTimeoutMs, runTimeoutMs } = deps.config.syntheticTools;

  const started = new Date();
  const runDeadline = started.getTime() + runTimeoutMs;
  const results = new Map<string, unknown>();
  const runs: SyntheticToolStepRun[] = tool.steps.map((step, i) => ({
    id: step.id,
    tool: { connector_slug: step.tool.connector_slug, connection_id: (connections[i] as Resolved).row.id, name: step.tool.name },
    status: 'skipped',
    started_at: null,
    duration_ms: null,
    error: null,
  }));
  const finish = (error: { step_id: string | null; message: string } | null, result: Json | null): SyntheticToolExecution => ({
    synthetic_tool_id: tool.id,
    is_error: error !== null,
    result: error ? null : result,
    content: [{ type: 'text', text: error ? error.message : JSON.stringify(result) }],
    error,
    steps: runs,
    started_at: started.toISOString(),
    duration_ms: Math.max(0, Date.now() - started.getTime()),
  });

  for (const [i, step] of tool.steps.entries()) {
    const run = runs[i] as SyntheticToolStepRun;
    const { row, connector } = connections[i] as Resolved;
    let stepArgs: Record<string, unknown>;
    try {
      stepArgs = evaluate(step.arguments, { input: args, results }) as Record<string, unknown>;
    } catch (err) {
      if (!(err instanceof MappingError)) throw err;
      // Its arguments cannot be built: the step fails without being called.
      Object.assign(run, { status: 'failed', started_at: new Date().toISOString(), duration_ms: 0, error: err.message });
      return finish({ step_id: step.id, message: `Step ${step.id}: ${err.message}` }, null);
    }
    const at = Date.now();
    run.started_at = new Date(at).toISOString();
    const timeoutMs = Math.min(stepTimeoutMs, runDeadline - at);
    let failure: string | null = null;
    let unreachable = false;
    // The step's record outcome, when the upstream was called.
    let called: 'succeeded' | 'tool_error' | 'unavailable' | 'cancelled' | null = null;
    // The upstream refused the connection's credentials (it is needs_reauth now).
    let refused = false;
    if (timeoutMs <= 0) {
      failure = `The run passed its overall deadline of ${runTimeoutMs} ms before this step.`;
      unreachable = true;
    } else {
      const invoked = await invokeTool(ctx, {
        connection: row,
        connector,
        tool: step.tool.name,
        args: stepArgs,
        signal,
        timeoutMs,
        label: `Synthetic tool ${tool.name}, step ${step.id}`,
      });
      called =
        invoked.outcome === 'answered' ? (invoked.result.isError ? 'tool_error' : 'succeeded') : invoked.outcome === 'cancelled' ? 'cancelled' : 'unavailable';
      if (invoked.outcome === 'answered') {
        if (invoked.result.isError) failure = errorTextOf(invoked.result);
        else results.set(step.id, resultOf(invoked.result));
      } else if (invoked.outcome === 'unavailable' || invoked.outcome === 'cancelled') {
        failure =
          invoked.outcome === 'cancelled'
            ? 'The run was cancelled.'
            : invoked.timedOut
              ? `${connector.name} did not answer within ${timeoutMs} ms.`
              : invoked.message;
        unreachable = true;
        if (invoked.outcome === 'unavailable')
          options.log?.info({ synthetic_tool_id: tool.id, step: step.id, reason: invoked.detail }, 'synthetic tool step: upstream unavailable');
      } else {
        failure = invoked.message;
        refused = true;
      }
    }
    run.duration_ms = Math.max(0, Date.now() - at);
    if (options.trace && called !== null) {
      deps.mcp.toolCalls.record({
        org_id: orgId,
        mcp_server_id: options.trace.mcpServerId,
        user_id: userId,
        user_toolbox_id: options.trace.userToolboxId,
        connection_id: row.id,
        connector_slug: step.tool.connector_slug,
        synthetic_tool_id: tool.id,
        tool_name: tool.name,
        upstream_tool: step.tool.name,
        outcome: called,
        error: failure ? failure.slice(0, 2000) : null,
        duration_ms: run.duration_ms,
        request_id: options.trace.requestId,
        jsonrpc_id: options.trace.jsonrpcId,
        created_at: new Date(),
      });
    }
    if (refused && step.on_error === 'fail') throw unavailable(`Step ${step.id}: ${failure}`);
    options.onStep?.(i + 1, tool.steps.length, `Step ${step.id} ${failure === null ? 'done' : 'failed'}`);
    if (failure === null) {
      run.status = 'succeeded';
      continue;
    }
    run.status = 'failed';
    run.error = failure;
    if (step.on_error === 'continue') continue;
    if (unreachable)
      throw new ApiError('upstream_unavailable', `Step ${step.id} (${step.tool.connector_slug} ${step.tool.name}): ${failure} The run stopped there.`);
    return finish({ step_id: step.id, message: `Step ${step.id}: ${failure}` }, null);
  }

  let result: Json;
  try {
    result = evaluate(tool.output, { input: args, results });
  } catch (err) {
    if (!(err instanceof MappingError)) throw err;
    return finish({ step_id: null, message: `Output: ${err.message}` }, null);
  }
  if (checkOutput) {
    const validate = checkOutput;
    let valid: boolean;
    try {
      valid = runValidator(validate, result);
    } catch (err) {
      if (!(err instanceof PatternWorkExceeded)) throw err;
      return finish({ step_id: null, message: `Output: checking it against the patterns of output_schema would take more than a call may use.` }, null);
    }
    if (!valid) {
      const problems = problemsOf(validate.errors, '').map((p) => `${p.pointer || '(the output)'} ${p.message}`);
      return finish({ step_id: null, message: `Output: it does not match output_schema: ${problems.slice(0, 5).join('; ')}.` }, null);
    }
  }
  return finish(null, result);
}

/**
 * executeSyntheticTool: one run as the caller, leaving the trace a run over MCP leaves (the
 * synthetic tool's tool-call record and one per step called), whether it succeeded, failed or
 * was refused before any step ran.
 */
export async function executeSyntheticTool(ctx: RequestContext, id: string, body: SyntheticToolExecuteRequest): Promise<SyntheticToolExecution> {
  const tool = await repo.findSyntheticTool(ctx.db, ctx.orgId, id);
  if (!tool) throw notFound('synthetic tool', id);
  const trace: RunTrace = { mcpServerId: null, userToolboxId: null, requestId: ctx.requestId, jsonrpcId: null };
  const startedMs = Date.now();
  const recorded = (outcome: string, error: string | null) =>
    recordSyntheticRun(ctx.deps, trace, { orgId: ctx.orgId, userId: ctx.user, toolId: tool.id, toolName: tool.name, outcome, error, startedMs });
  try {
    const run = await runSyntheticTool(ctx.deps, ctx.orgId, ctx.user, tool, body.arguments ?? {}, ctx.signal, {
      bindings: body.bindings,
      context: ctx,
      log: ctx.log,
      trace,
    });
    recorded(run.is_error ? 'tool_error' : 'succeeded', run.error?.message ?? null);
    return run;
  } catch (err) {
    if (err instanceof ApiError) recorded(refusalOutcome(err), err.detail);
    throw err;
  }
}
