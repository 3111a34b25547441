import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { OperationHandler, ProtocolResult } from '../../http/handler-types';
import { ApiError } from '../../http/errors';
import type { RequestContext } from '../../http/context';
import { refuseProblems } from '../../http/protocol';
import type { ServerSentEvent } from '../../http/handler-types';
import {
  challenge,
  classify,
  errorResponse,
  HANDSHAKE_VERSIONS,
  MODERN_VERSION,
  INVALID_PARAMS,
  INVALID_REQUEST,
  LATEST_VERSION,
  METHOD_NOT_FOUND,
  resultResponse,
  SERVER_ERROR,
  SUPPORTED_VERSIONS,
  type JsonRpcErrorCode,
  type JsonRpcId,
  type JsonRpcRequest,
} from './jsonrpc';
import { DISCOVER_TTL_MS, eraOf, modernResponse, TOOLS_LIST_TTL_MS, withoutHeaderMirroring, type ServerInfo } from './revision-2026';
import { invokeTool } from '../invoke';
import { findSyntheticTool, refusalOutcome, runSyntheticTool } from '../../areas/synthetic-tools';
import type { OfferedTool } from '../../areas/user-toolboxes';
import { ServedTools, type McpServerRow } from '../served-tools';
import { failed, SpanKind, type Attributes } from '../../lib/tracing';

/**
 * postMcpMessage and deleteMcpSession: the MCP endpoint `/mcp/{mcpId}` (spec/paths/mcp.yml),
 * stateless — nothing is kept between requests but the in-flight calls of this process, so
 * that a `notifications/cancelled` reaching the same replica stops its call.
 */

const SERVER_INFO = { name: 'mcp-control-plane', version: '0.1.0' };
const PAGE_SIZE = 500;
const SYNTHETIC_PERMISSION = 'synthetic_tool:execute';
const UPSTREAM_PERMISSION = 'connection:use';

type Ctx = RequestContext;
/** What an existing MCP server serves. */
type Served = ServedTools & { readonly server: McpServerRow };
type Result = ProtocolResult<'postMcpMessage'>;

/** An answer the typed results do not cover (406, 403, 404, 400 for a batch): sent as it is. */
const raw = <S extends 400 | 403 | 404 | 406>(status: S, id: JsonRpcId | null, code: JsonRpcErrorCode, message: string, requestId: string) => ({
  status,
  body: errorResponse(id, code, message, { request_id: requestId }),
});

function acceptsBoth(accept: string | null | undefined): boolean {
  if (!accept) return false;
  const types = accept.split(',').map((part) => part.split(';')[0]?.trim().toLowerCase());
  const json = types.some((t) => t === 'application/json' || t === 'application/*' || t === '*/*');
  const sse = types.some((t) => t === 'text/event-stream' || t === 'text/*' || t === '*/*');
  return json && sse;
}

type NotFound = ReturnType<typeof raw<404>>;

/**
 * Credential and server checks shared by POST and DELETE; answers what the server serves.
 * (The Origin was checked before authentication: the area's `beforeAuthentication`.)
 */
async function admit(ctx: Ctx, mcpId: string): Promise<Served | NotFound> {
  const caller = ctx.caller;
  if (!caller || caller.kind !== 'mcp_client') throw new ApiError('invalid_token', 'This endpoint takes an MCP server token or an OAuth access token.');
  // A token is validated for its audience (MCP authorization): another MCP server's token is
  // not valid here, a 401 whose challenge names this server's metadata so that the client gets
  // one for it. Checked before the server is looked up, so it says nothing about this one.
  if (caller.mcpServerId !== mcpId) throw new ApiError('invalid_token', 'The token was issued for another MCP server; get a token for this one.');
  // An OAuth token granted only other scopes (openid, profile, email) may not call tools: the
  // scope challenge tells the client what to ask for (MCP authorization, scope step-up).
  if (caller.via === 'oauth' && !(caller.scopes ?? []).includes('mcp')) {
    const description = 'This access token was not granted the mcp scope; authorize again asking for it.';
    throw new ApiError('insufficient_access', description, {
      headers: { 'WWW-Authenticate': challenge(ctx.deps.config.baseUrl, mcpId, { code: 'insufficient_scope', description }) },
    });
  }
  const served = await ctx.deps.mcp.servedTools.get(ctx.deps, mcpId);
  if (!served.server) return raw(404, null, SERVER_ERROR, `Not Found: no MCP server ${mcpId}`, ctx.requestId);
  return served as Served;
}

const isServed = (value: Served | NotFound): value is Served => value instanceof ServedTools;

/** Whether the caller holds a permission (an MCP client: within the ceiling of whoever minted its token). */
const holds = (ctx: Ctx, permission: string): boolean => ctx.caller?.kind === 'mcp_client' && (ctx.caller.access?.permissions.has(permission) ?? false);

/**
 * Whether the caller may see and call a tool: an upstream tool with `connection:use` (calling
 * tools through connections), a synthetic one with `synthetic_tool:execute`, as the API asks.
 */
function mayCall(ctx: Ctx, tool: OfferedTool): boolean {
  return holds(ctx, tool.source.kind === 'synthetic' ? SYNTHETIC_PERMISSION : UPSTREAM_PERMISSION);
}

/** The tools the caller sees: what the server serves, of the kinds the caller may call. */
function offeredTools(ctx: Ctx, served: ServedTools): readonly OfferedTool[] {
  const synthetic = holds(ctx, SYNTHETIC_PERMISSION);
  const upstream = holds(ctx, UPSTREAM_PERMISSION);
  if (synthetic && upstream) return served.tools;
  return served.tools.filter((t) => (t.source.kind === 'synthetic' ? synthetic : upstream));
}

/** The tool a call names, if the caller sees it. */
function offeredTool(ctx: Ctx, served: ServedTools, name: string): OfferedTool | undefined {
  const tool = served.byName.get(name);
  return tool && mayCall(ctx, tool) ? tool : undefined;
}

/**
 * A tool's annotations as MCP names them (`readOnlyHint`…): the API keeps them in snake_case;
 * hints the upstream did not give are left out. Undefined when it gave none.
 */
function mcpAnnotations(annotations: OfferedTool['annotations']): Record<string, boolean> | undefined {
  if (!annotations) return undefined;
  const hints: Record<string, boolean> = {};
  if (annotations.read_only_hint !== null) hints.readOnlyHint = annotations.read_only_hint;
  if (annotations.destructive_hint !== null) hints.destructiveHint = annotations.destructive_hint;
  if (annotations.idempotent_hint !== null) hints.idempotentHint = annotations.idempotent_hint;
  if (annotations.open_world_hint !== null) hints.openWorldHint = annotations.open_world_hint;
  return Object.keys(hints).length > 0 ? hints : undefined;
}

/**
 * A schema whose `properties` hold boolean subschemas (`"x": true`, valid JSON Schema) with
 * each as the object it means (`{}`, or `{"not": {}}` for false): clients of the handshake
 * revisions (the SDKs among them) refuse a whole tools/list page over one such property.
 */
function withObjectProperties<S extends Record<string, unknown>>(schema: S): S {
  const properties = schema.properties;
  if (!properties || typeof properties !== 'object' || !Object.values(properties).some((p) => typeof p === 'boolean')) return schema;
  const objects = Object.fromEntries(Object.entries(properties).map(([name, p]) => [name, p === true ? {} : p === false ? { not: {} } : p]));
  return { ...schema, properties: objects };
}

function toMcpTool(tool: OfferedTool) {
  const annotations = mcpAnnotations(tool.annotations);
  return {
    name: tool.name,
    ...(tool.title ? { title: tool.title } : {}),
    ...(tool.description ? { description: tool.description } : {}),
    inputSchema: withObjectProperties(tool.input_schema),
    ...(tool.output_schema ? { outputSchema: withObjectProperties(tool.output_schema) } : {}),
    ...(annotations ? { annotations: annotations as Record<string, boolean | string> } : {}),
  };
}

/** Offered tools live as long as the served-tools entry that holds them: each is put in MCP form once (never mutated after). */
const mcpForms = new WeakMap<OfferedTool, ReturnType<typeof toMcpTool>>();

function mcpTool(tool: OfferedTool) {
  let form = mcpForms.get(tool);
  if (!form) {
    form = toMcpTool(tool);
    mcpForms.set(tool, form);
  }
  return form;
}

const toolError = (text: string): CallToolResult => ({ content: [{ type: 'text', text }], isError: true });

interface CallOutcome {
  result: CallToolResult;
  outcome: 'succeeded' | 'tool_error' | 'held' | 'unavailable' | 'cancelled';
  error: string | null;
}

async function heldMessage(ctx: Ctx, tool: OfferedTool): Promise<string> {
  const id = tool.verdict.heldBy[0] ?? '';
  const found = await ctx.db.selectFrom('restrictions').select(['name']).where('id', '=', id).executeTakeFirst();
  return `${tool.name} is held for approval by the restriction "${found?.name ?? id}" (${id}). Ask for access in the web app, or with POST /access-request and that restriction_id.`;
}

async function callOffered(
  ctx: Ctx,
  served: Served,
  id: JsonRpcId,
  tool: OfferedTool,
  args: Record<string, unknown>,
  signal: AbortSignal,
  onprogress?: (progress: { progress: number; total?: number; message?: string }) => void,
): Promise<CallOutcome> {
  const { server } = served;
  if (!tool.verdict.callable) {
    const text = await heldMessage(ctx, tool);
    return { result: toolError(text), outcome: 'held', error: text };
  }
  if (tool.source.kind === 'synthetic') {
    const row = await findSyntheticTool(ctx.db, server.org_id, tool.source.synthetic_tool_id);
    if (!row) return { result: toolError(`${tool.name} no longer exists.`), outcome: 'unavailable', error: 'synthetic tool deleted' };
    try {
      const run = await runSyntheticTool(ctx.deps, server.org_id, server.owner_user_id, row, args, signal, {
        log: ctx.log,
        trace: { mcpServerId: server.id, userToolboxId: server.user_toolbox_id, requestId: ctx.requestId, jsonrpcId: String(id) },
        ...(onprogress ? { onStep: (done: number, total: number, message: string) => onprogress({ progress: done, total, message }) } : {}),
      });
      const result: CallToolResult = { content: run.content as CallToolResult['content'], isError: run.is_error };
      if (!run.is_error && run.result !== null && typeof run.result === 'object' && !Array.isArray(run.result))
        result.structuredContent = run.result as Record<string, unknown>;
      return { result, outcome: run.is_error ? 'tool_error' : 'succeeded', error: run.error?.message ?? null };
    } catch (err) {
      if (err instanceof ApiError) return { result: toolError(err.detail), outcome: refusalOutcome(err), error: err.detail };
      throw err;
    }
  }
  const source = tool.source;
  const row = served.connection(source.connection_id);
  if (!row || row.status !== 'active') {
    const text = `${tool.name} cannot be called: its connection is ${row ? row.status : 'gone'}${row?.status === 'needs_reauth' ? '; reconnect it in the web app' : ''}.`;
    return { result: toolError(text), outcome: 'unavailable', error: text };
  }
  // The connector as the connection's owner sees it (a shared toolbox's connection acts as its owner).
  const connector = await served.connector(row.owner_user_id, source.connector_slug);
  if (!connector)
    return {
      result: toolError(`${tool.name} cannot be called: its connector is no longer available.`),
      outcome: 'unavailable',
      error: 'connector unavailable',
    };
  const invoked = await invokeTool(ctx, {
    connection: row,
    connector,
    tool: source.tool,
    args,
    signal,
    onprogress,
    annotations: tool.annotations,
    label: `tools/call ${source.tool}`,
  });
  switch (invoked.outcome) {
    case 'answered':
      return { result: invoked.result, outcome: invoked.result.isError ? 'tool_error' : 'succeeded', error: null };
    case 'cancelled':
      return { result: toolError('The call was cancelled.'), outcome: 'cancelled', error: 'cancelled' };
    case 'needs_reauth':
      return { result: toolError(invoked.message), outcome: 'unavailable', error: invoked.message };
    case 'unavailable':
      return {
        result: toolError(`${connector.name} could not be reached or did not answer in time: ${invoked.message}`),
        outcome: 'unavailable',
        error: invoked.detail,
      };
  }
}

/** The call's tool-call record, written off the answer's path (tool-call-records.ts). */
function record(
  ctx: Ctx,
  server: McpServerRow,
  id: JsonRpcId,
  name: string,
  tool: OfferedTool | null,
  outcome: string,
  error: string | null,
  started: number,
): void {
  const source = tool?.source;
  const now = Date.now();
  ctx.deps.mcp.toolCalls.record({
    org_id: server.org_id,
    mcp_server_id: server.id,
    user_id: server.owner_user_id,
    user_toolbox_id: server.user_toolbox_id,
    connection_id: source?.kind === 'upstream' ? source.connection_id : null,
    connector_slug: source?.kind === 'upstream' ? source.connector_slug : null,
    synthetic_tool_id: source?.kind === 'synthetic' ? source.synthetic_tool_id : null,
    tool_name: name.slice(0, 512),
    upstream_tool: source?.kind === 'upstream' ? source.tool : null,
    outcome,
    error: error ? error.slice(0, 2000) : null,
    duration_ms: Math.max(0, Math.round(now - started)),
    request_id: ctx.requestId,
    jsonrpc_id: String(id),
    created_at: new Date(now),
  });
}

/** tools/call: one JSON-RPC response; progress through `onprogress` when the client asked. */
async function toolsCall(ctx: Ctx, served: Served, request: JsonRpcRequest, onprogress?: (p: { progress: number; total?: number; message?: string }) => void) {
  const started = Date.now();
  const { server } = served;
  const params = request.params ?? {};
  const name = params.name;
  const args = params.arguments ?? {};
  if (typeof name !== 'string' || typeof args !== 'object' || args === null || Array.isArray(args)) {
    return errorResponse(request.id, INVALID_PARAMS, 'Invalid params: tools/call takes a name and an arguments object');
  }
  const tool = offeredTool(ctx, served, name);
  if (!tool) {
    record(ctx, server, request.id, name, null, 'refused', 'unknown tool', started);
    return errorResponse(request.id, INVALID_PARAMS, `Unknown tool: ${name}`);
  }
  // Stopped by the client's notifications/cancelled (in-flight.ts) or by the client going away.
  const call = ctx.deps.mcp.inFlight.start(server.id, request.id);
  const stopListening = ctx.whenGone(() => call.abort());
  try {
    const outcome = await callOffered(ctx, served, request.id, tool, args as Record<string, unknown>, call.signal, onprogress);
    record(ctx, server, request.id, name, tool, outcome.outcome, outcome.error, started);
    return resultResponse(request.id, outcome.result as Record<string, unknown>);
  } finally {
    stopListening();
    call.done();
  }
}

async function answer(ctx: Ctx, served: Served, request: JsonRpcRequest, version: string) {
  const { server } = served;
  switch (request.method) {
    case 'initialize': {
      const asked = request.params?.protocolVersion;
      const protocolVersion = typeof asked === 'string' && (HANDSHAKE_VERSIONS as readonly string[]).includes(asked) ? asked : LATEST_VERSION;
      return resultResponse(request.id, {
        protocolVersion,
        capabilities: { tools: { listChanged: false } },
        // The revision agreed on here, not the header's: clients send no header with initialize.
        serverInfo: { ...SERVER_INFO, ...(protocolVersion === '2025-03-26' ? {} : { title: server.name }) },
        instructions: `Tools of the MCP server "${server.name}".`,
      });
    }
    case 'ping':
      return resultResponse(request.id, {});
    case 'server/discover':
      return modernResponse(discover(request.id, server), serverInfoOf(server), { ttlMs: DISCOVER_TTL_MS });
    case 'tools/list':
      return toolsList(ctx, served, request, version === '2025-03-26' ? withTitleInAnnotations : undefined);
    case 'tools/call':
      return version === '2025-03-26' ? withoutResourceLinks(await toolsCall(ctx, served, request)) : toolsCall(ctx, served, request);
    default:
      return errorResponse(request.id, METHOD_NOT_FOUND, `Method not found: ${request.method}`);
  }
}

/** 2025-03-26 has no tool `title`: its clients read a display name from `annotations.title`. */
const withTitleInAnnotations = (tool: McpToolShape): McpToolShape => (tool.title ? { ...tool, annotations: { ...tool.annotations, title: tool.title } } : tool);

/**
 * 2025-03-26 has no `resource_link` content (later revisions added it, and clients of that
 * revision refuse a result that carries one): each becomes a text block naming the resource.
 */
function withoutResourceLinks<R extends object>(response: R): R {
  const result = (response as { result?: Record<string, unknown> }).result;
  const content = result?.content;
  if (!Array.isArray(content) || !content.some((block) => (block as { type?: unknown })?.type === 'resource_link')) return response;
  const text = (block: Record<string, unknown>) => ({
    type: 'text',
    text: `${typeof block.title === 'string' ? block.title : String(block.name ?? 'Resource')}: ${String(block.uri ?? '')}`,
  });
  return {
    ...response,
    result: {
      ...result,
      content: content.map((block) => ((block as { type?: unknown })?.type === 'resource_link' ? text(block as Record<string, unknown>) : block)),
    },
  };
}

const serverInfoOf = (server: McpServerRow): ServerInfo => ({ ...SERVER_INFO, title: server.name });

/** server/discover (2026-07-28): the revisions, capabilities and instructions; `_meta` and cache hints are added by modernResponse. */
const discover = (id: JsonRpcId, server: McpServerRow) =>
  resultResponse(id, {
    supportedVersions: [...SUPPORTED_VERSIONS],
    capabilities: { tools: { listChanged: false } },
    instructions: `Tools of the MCP server "${server.name}".`,
  });

/**
 * A 2026-07-28 request (the checks of eraOf passed): `server/discover`, `tools/list` and
 * `tools/call` answered with `resultType`, `_meta` and cache hints; any other method
 * (`initialize` and `ping` included, which the revision dropped) is 404 with -32601.
 */
async function answerModern(ctx: Ctx, served: Served, request: JsonRpcRequest): Promise<Result> {
  const { server } = served;
  const info = serverInfoOf(server);
  switch (request.method) {
    case 'server/discover':
      return { status: 200, body: modernResponse(discover(request.id, server), info, { ttlMs: DISCOVER_TTL_MS }) };
    case 'tools/list':
      return { status: 200, body: modernResponse(await toolsList(ctx, served, request, withoutHeaderMirroring), info, { ttlMs: TOOLS_LIST_TTL_MS }) };
    case 'tools/call':
      return { status: 200, body: modernResponse(await toolsCall(ctx, served, request), info) };
    default:
      return { status: 404, body: errorResponse(request.id, METHOD_NOT_FOUND, `Method not found: ${request.method}`) };
  }
}

type McpToolShape = ReturnType<typeof toMcpTool>;

function toolsList(ctx: Ctx, served: Served, request: JsonRpcRequest, present: (tool: McpToolShape) => McpToolShape = (tool) => tool) {
  const cursor = request.params?.cursor;
  let offset = 0;
  if (cursor !== undefined) {
    const decoded = typeof cursor === 'string' && /^o(\d{1,9})$/.exec(Buffer.from(cursor, 'base64url').toString());
    if (!decoded) return errorResponse(request.id, INVALID_PARAMS, 'Invalid params: unknown cursor');
    offset = Number(decoded[1]);
  }
  const tools = offeredTools(ctx, served);
  const page = tools.slice(offset, offset + PAGE_SIZE).map((tool) => present(mcpTool(tool)));
  const next = offset + PAGE_SIZE < tools.length ? Buffer.from(`o${offset + PAGE_SIZE}`).toString('base64url') : undefined;
  return resultResponse(request.id, { tools: page, ...(next ? { nextCursor: next } : {}) });
}

/** A tools/call answered as server-sent events: progress notifications as they come, then the response. */
function streamed(
  ctx: Ctx,
  served: Served,
  request: JsonRpcRequest,
  progressToken: string | number,
  version: string,
  finish: <R extends Awaited<ReturnType<typeof toolsCall>>>(response: R) => R = (response) => response,
): AsyncIterable<ServerSentEvent> {
  const queue: ServerSentEvent[] = [];
  let wake: (() => void) | null = null;
  let done = false;
  const push = (data: object) => {
    queue.push({ event: 'message', data });
    wake?.();
  };
  void traced(ctx, request, version, () =>
    toolsCall(ctx, served, request, (p) =>
      push({
        jsonrpc: '2.0',
        method: 'notifications/progress',
        params: {
          progressToken,
          progress: p.progress,
          ...(p.total !== undefined ? { total: p.total } : {}),
          ...(p.message !== undefined ? { message: p.message } : {}),
        },
      }),
    ),
  )
    .then(
      (response) => push(finish(response)),
      (err: unknown) => {
        ctx.log.error({ err }, 'tools/call failed');
        push(errorResponse(request.id, -32603, 'Internal error; quote the request id when reporting it.', { request_id: ctx.requestId }));
      },
    )
    .finally(() => {
      done = true;
      wake?.();
    });
  return {
    async *[Symbol.asyncIterator]() {
      for (;;) {
        const next = queue.shift();
        if (next) {
          yield next;
          continue;
        }
        if (done) return;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = null;
      }
    },
  };
}

/**
 * A span per JSON-RPC request handled, as the MCP semantic conventions name it (`tools/call
 * get_weather`, `tools/list`): a child of the HTTP request's span, or of the trace context the
 * client put in the message's `_meta`. The tool's name is recorded, never its arguments.
 */
function traced<R>(ctx: Ctx, request: JsonRpcRequest, version: string, work: () => Promise<R>): Promise<R> {
  const tracing = ctx.deps.tracing;
  if (!tracing.enabled) return work();
  const tool = request.method === 'tools/call' && typeof request.params?.name === 'string' ? request.params.name : null;
  const attributes: Attributes = {
    'mcp.method.name': request.method,
    'jsonrpc.request.id': String(request.id),
    'mcp.protocol.version': version,
    'network.transport': 'tcp',
    'network.protocol.name': 'http',
    ...(tool !== null ? { 'gen_ai.tool.name': tool, 'gen_ai.operation.name': 'execute_tool' } : {}),
  };
  const meta = request.params?._meta as { traceparent?: unknown; tracestate?: unknown } | undefined;
  const name = tool !== null ? `tools/call ${tool}` : request.method;
  return tracing.inSpan(name, { kind: SpanKind.SERVER, attributes, ...(meta ? { remoteParent: meta } : {}) }, async (span) => {
    const response = await work();
    const message = (response as { body?: unknown }).body ?? response;
    const error = (message as { error?: { code?: unknown } }).error;
    if (error) {
      span?.setAttribute('rpc.response.status_code', String(error.code));
      failed(span, String(error.code));
    } else if ((message as { result?: { isError?: unknown } }).result?.isError === true) failed(span, 'tool_error');
    return response;
  });
}

export const mcpEndpointHandlers: {
  postMcpMessage: OperationHandler<'postMcpMessage', RequestContext>;
  deleteMcpSession: OperationHandler<'deleteMcpSession', RequestContext>;
} = {
  async postMcpMessage(input, ctx) {
    if (!input.valid) refuseProblems('jsonrpc', input.problems);
    const { params, headers, body } = input.value;
    if (!acceptsBoth(ctx.client.accept)) {
      return raw(406, null, SERVER_ERROR, 'Not Acceptable: Client must accept both application/json and text/event-stream', ctx.requestId);
    }
    const admitted = await admit(ctx, params.mcpId);
    if (!isServed(admitted)) return admitted;
    const served = admitted;
    const { server } = served;
    const era = eraOf({ version: headers['MCP-Protocol-Version'], method: headers['Mcp-Method'], name: headers['Mcp-Name'] }, body, ctx.requestId);
    if (era.era === 'refused') return { status: era.status, body: era.body };
    const version = era.era === 'modern' ? MODERN_VERSION : era.version;
    const batch = Array.isArray(body);
    if (batch && version !== '2025-03-26') {
      return raw(400, null, INVALID_REQUEST, `Invalid Request: batches are only accepted with MCP-Protocol-Version 2025-03-26, not ${version}`, ctx.requestId);
    }
    const messages = (batch ? body : [body]) as Record<string, unknown>[];
    const requests: JsonRpcRequest[] = [];
    for (const message of messages) {
      const sorted = classify(message);
      if (sorted.kind === 'request') requests.push(sorted.request);
      else if (sorted.kind === 'notification' && sorted.method === 'notifications/cancelled') {
        const id = sorted.params.requestId;
        if (typeof id === 'string' || typeof id === 'number') ctx.deps.mcp.inFlight.cancel(server.id, id);
      }
    }
    if (requests.length === 0) return { status: 202 };
    const only = requests[0] as JsonRpcRequest;
    const progressToken = (only.params?._meta as { progressToken?: unknown } | undefined)?.progressToken;
    if (!batch && only.method === 'tools/call' && (typeof progressToken === 'string' || typeof progressToken === 'number')) {
      const finish =
        era.era === 'modern'
          ? <R extends Parameters<typeof modernResponse>[0]>(r: R) => modernResponse(r, serverInfoOf(server))
          : version === '2025-03-26'
            ? withoutResourceLinks
            : undefined;
      return { status: 200, events: streamed(ctx, served, only, progressToken, version, finish) };
    }
    if (era.era === 'modern') return traced(ctx, only, version, () => answerModern(ctx, served, only));
    const responses = [];
    for (const request of requests) responses.push(await traced(ctx, request, version, () => answer(ctx, served, request, version)));
    return { status: 200, body: batch ? responses : (responses[0] as (typeof responses)[number]) };
  },

  async deleteMcpSession(input, ctx) {
    if (!input.valid) refuseProblems('jsonrpc', input.problems);
    const { params } = input.value;
    const admitted = await admit(ctx, params.mcpId);
    if (!isServed(admitted)) return admitted;
    return { status: 204 };
  },
};
