import { gzipSync } from 'node:zlib';
import type { components } from '../../../generated/openapi';
import type { RecordKind } from '../../events/records';

/*
 * The records a logging destination exports, and each backend's wire format for a batch of
 * them, as its vendor documents it. Nothing here sends: it turns records into request bodies
 * and headers, and a backend's answer into what the worker does next.
 */

export type DestinationType = components['schemas']['LoggingDestinationType'];
export type DatadogSite = components['schemas']['DatadogSite'];

/** The non-secret settings, as stored in the `config` column. */
export interface StoredConfig {
  url: string | null;
  site: DatadogSite | null;
  index: string | null;
  source: string | null;
  sourcetype: string | null;
  request_channel: string | null;
  service: string | null;
  header_names: string[];
}

/** The secrets, sealed together in `secrets_enc`. */
export interface StoredSecrets {
  api_key?: string;
  hec_token?: string;
  headers?: Record<string, string>;
}

export interface Target {
  id: string;
  type: DestinationType;
  config: StoredConfig;
  secrets: StoredSecrets;
}

/**
 * A record as every destination receives it: the generic JSON of `http` destinations, the
 * attributes of a Datadog entry, the `event` of a Splunk HEC event. Never tool arguments or
 * results, never secrets (audit `changes` never hold them).
 */
export type ExportRecord = { type: RecordKind | 'test'; id: string; organization_id: string; occurred_at: string } & Record<string, unknown>;

const DEFAULT_NAME = 'mcp-control-plane';
const SCOPE_VERSION = '0.1';

const iso = (value: unknown): string => new Date(value as string).toISOString();

/** An audit entry as stored (`to_jsonb` of its audit_log row) → its record. */
function auditRecord(row: Record<string, any>): ExportRecord {
  return {
    type: 'audit',
    id: row.id,
    organization_id: row.org_id,
    occurred_at: iso(row.created_at),
    action: row.action,
    actor: { type: row.actor_type, id: row.actor_id ?? null, user_id: row.actor_user_id ?? null },
    target: { type: row.target_type ?? null, id: row.target_id ?? null },
    changes: row.changes ?? {},
    ip: row.ip ?? null,
    user_agent: row.user_agent ?? null,
    request_id: row.request_id ?? null,
  };
}

/** A tool-call record as stored (`to_jsonb` of its tool_call_records row) → its record. Arguments and results were never stored. */
function toolCallRecord(row: Record<string, any>): ExportRecord {
  return {
    type: 'tool_call',
    id: String(row.id),
    organization_id: row.org_id,
    occurred_at: iso(row.created_at),
    tool_name: row.tool_name,
    outcome: row.outcome,
    error: row.error ?? null,
    duration_ms: row.duration_ms,
    user_id: row.user_id,
    mcp_server_id: row.mcp_server_id ?? null,
    user_toolbox_id: row.user_toolbox_id ?? null,
    connection_id: row.connection_id ?? null,
    connector_slug: row.connector_slug ?? null,
    upstream_tool: row.upstream_tool ?? null,
    synthetic_tool_id: row.synthetic_tool_id ?? null,
    request_id: row.request_id,
    jsonrpc_id: row.jsonrpc_id ?? null,
  };
}

export function recordOf(kind: RecordKind, payload: unknown): ExportRecord {
  const row = payload as Record<string, any>;
  return kind === 'audit' ? auditRecord(row) : toolCallRecord(row);
}

export function testRecord(id: string, orgId: string, destinationId: string, at: Date): ExportRecord {
  return {
    type: 'test',
    test: true,
    id,
    organization_id: orgId,
    occurred_at: at.toISOString(),
    destination_id: destinationId,
    message: 'A test record from the MCP control plane; it can be dropped.',
  };
}

/** One line a person reads in a log viewer. */
function summary(record: ExportRecord): string {
  if (record.type === 'audit') {
    const actor = record.actor as { type: string; id: string | null };
    const target = record.target as { type: string | null; id: string | null };
    return `${record.action as string} by ${actor.type}${actor.id ? ` ${actor.id}` : ''}${target.id ? ` on ${target.type ?? 'target'} ${target.id}` : ''}`;
  }
  if (record.type === 'tool_call') return `tools/call ${record.tool_name as string}: ${record.outcome as string} in ${record.duration_ms as number} ms`;
  return record.message as string;
}

const failed = (record: ExportRecord) => record.type === 'tool_call' && record.outcome !== 'succeeded';

// ---------------------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------------------

/** What one request may carry, per type: Datadog's are its intake's documented limits. */
export const LIMITS: Readonly<Record<DestinationType, { records: number; bytes: number; maxAgeMs: number | null }>> = {
  http: { records: 500, bytes: 1_000_000, maxAgeMs: null },
  // 1000 entries and 5 MB uncompressed per request; older than 18 hours is refused.
  datadog: { records: 1000, bytes: 5_000_000, maxAgeMs: 18 * 3_600_000 },
  splunk_hec: { records: 500, bytes: 1_000_000, maxAgeMs: null },
  otlp_http: { records: 500, bytes: 1_000_000, maxAgeMs: null },
};

/** Datadog truncates a log over 1 MB; we cut the long members first so the entry stays valid JSON and says so. */
const DATADOG_ENTRY_MAX = 1_000_000;

export interface Request {
  url: string;
  headers: Record<string, string>;
  body: Buffer;
}

/** Each record encoded alone, so that a batch can be cut where it would pass the request limit. */
export function encodeEach(target: Target, records: readonly ExportRecord[], host: string): string[] {
  switch (target.type) {
    case 'http':
      return records.map((r) => JSON.stringify(r));
    case 'datadog':
      return records.map((r) => datadogEntry(target, r, host));
    case 'splunk_hec':
      return records.map((r) => splunkEvent(target, r, host));
    case 'otlp_http':
      return records.map((r) => JSON.stringify(otlpLogRecord(r)));
  }
}

/** How many of the encoded records (in order, at least one) fit in one request. */
export function fitting(type: DestinationType, encoded: readonly string[]): number {
  const { records, bytes } = LIMITS[type];
  let size = 2;
  let count = 0;
  for (const entry of encoded) {
    size += Buffer.byteLength(entry) + 1;
    if (count > 0 && (count >= records || size > bytes)) break;
    count += 1;
  }
  return count;
}

/** The request carrying these encoded records. */
export function request(target: Target, encoded: readonly string[], datadogIntakeUrl: string): Request {
  const headers: Record<string, string> = {};
  switch (target.type) {
    case 'http':
      return {
        url: target.config.url as string,
        headers: { ...target.secrets.headers, 'content-type': 'application/json' },
        body: Buffer.from(`[${encoded.join(',')}]`),
      };
    case 'datadog':
      return {
        url: datadogIntakeUrl.replace('{site}', target.config.site as string),
        headers: { 'content-type': 'application/json', 'content-encoding': 'gzip', 'dd-api-key': target.secrets.api_key ?? '' },
        body: gzipSync(`[${encoded.join(',')}]`),
      };
    case 'splunk_hec':
      headers.authorization = `Splunk ${target.secrets.hec_token ?? ''}`;
      headers['content-type'] = 'application/json';
      if (target.config.request_channel) headers['x-splunk-request-channel'] = target.config.request_channel;
      // HEC's batch format: event objects one after another, not a JSON array.
      return { url: target.config.url as string, headers, body: Buffer.from(encoded.join('')) };
    case 'otlp_http':
      return {
        url: target.config.url as string,
        headers: { ...target.secrets.headers, 'content-type': 'application/json' },
        body: Buffer.from(otlpRequest(target, encoded)),
      };
  }
}

// ---------------------------------------------------------------------------------------
// Datadog: HTTP API v2 logs intake
// ---------------------------------------------------------------------------------------

function datadogEntry(target: Target, record: ExportRecord, host: string): string {
  const entry = (r: ExportRecord) =>
    JSON.stringify({
      ddsource: target.config.source ?? DEFAULT_NAME,
      ddtags: `record_type:${r.type},organization_id:${r.organization_id}`,
      hostname: host,
      service: target.config.service ?? DEFAULT_NAME,
      status: failed(r) ? 'error' : 'info',
      message: summary(r).slice(0, 10_000),
      timestamp: Date.parse(r.occurred_at),
      ...r,
    });
  const whole = entry(record);
  if (Buffer.byteLength(whole) <= DATADOG_ENTRY_MAX) return whole;
  const cut: ExportRecord = { ...record, truncated: true };
  for (const member of ['changes', 'error', 'user_agent', 'tool_name', 'upstream_tool']) {
    if (member in cut) cut[member] = member === 'changes' ? { truncated: true } : String(cut[member] ?? '').slice(0, 1000);
  }
  return entry(cut);
}

// ---------------------------------------------------------------------------------------
// Splunk HTTP Event Collector: /services/collector/event
// ---------------------------------------------------------------------------------------

function splunkEvent(target: Target, record: ExportRecord, host: string): string {
  const event: Record<string, unknown> = {
    // Epoch seconds with milliseconds, as HEC's `time` takes them.
    time: Date.parse(record.occurred_at) / 1000,
    host,
    source: target.config.source ?? DEFAULT_NAME,
    sourcetype: target.config.sourcetype ?? '_json',
  };
  if (target.config.index) event.index = target.config.index;
  event.event = record;
  return JSON.stringify(event);
}

// ---------------------------------------------------------------------------------------
// OTLP/HTTP logs, JSON encoding (the OTLP specification's JSON mapping of the protobuf)
// ---------------------------------------------------------------------------------------

type AnyValue = { stringValue: string } | { intValue: string } | { boolValue: boolean };
type KeyValue = { key: string; value: AnyValue };

const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz';

/**
 * A request id (`req_` and a ULID, 128 bits) as an OTLP trace id: 32 lowercase hex digits,
 * not base64 as protobuf JSON would have bytes. Every record of one request (its audit entry,
 * the tool calls it served) then shares a trace id in the collector. Null for anything else.
 */
export function traceIdOf(requestId: unknown): string | null {
  if (typeof requestId !== 'string') return null;
  const ulid = /^req_([0-7][0-9a-hjkmnp-tv-z]{25})$/.exec(requestId)?.[1];
  if (!ulid) return null;
  let value = 0n;
  for (const c of ulid) value = value * 32n + BigInt(CROCKFORD.indexOf(c));
  const hex = value.toString(16).padStart(32, '0');
  return /^0+$/.test(hex) ? null : hex;
}

/** Nanoseconds since the epoch: a 64-bit integer, which OTLP JSON writes as a decimal string. */
const unixNano = (iso: string): string => (BigInt(Date.parse(iso)) * 1_000_000n).toString();

function attributes(values: Record<string, string | number | boolean | null | undefined>): KeyValue[] {
  const out: KeyValue[] = [];
  for (const [key, value] of Object.entries(values)) {
    if (value === null || value === undefined) continue;
    if (typeof value === 'number') out.push({ key, value: { intValue: String(Math.trunc(value)) } });
    else if (typeof value === 'boolean') out.push({ key, value: { boolValue: value } });
    else out.push({ key, value: { stringValue: value } });
  }
  return out;
}

// SeverityNumber is an enum: JSON carries its integer.
const SEVERITY_INFO = 9;
const SEVERITY_ERROR = 17;

function otlpAttributes(record: ExportRecord): KeyValue[] {
  const common = {
    'mcp_control_plane.record.type': record.type,
    'mcp_control_plane.record.id': record.id,
    'mcp_control_plane.organization.id': record.organization_id,
  };
  if (record.type === 'tool_call') {
    return attributes({
      // MCP semantic conventions (OpenTelemetry semconv, gen-ai/mcp).
      'mcp.method.name': 'tools/call',
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': record.tool_name as string,
      'jsonrpc.request.id': record.jsonrpc_id as string | null,
      'error.type': record.outcome === 'succeeded' ? null : (record.outcome as string),
      'user.id': record.user_id as string,
      ...common,
      'mcp_control_plane.tool_call.outcome': record.outcome as string,
      'mcp_control_plane.tool_call.error': record.error as string | null,
      'mcp_control_plane.tool_call.duration_ms': record.duration_ms as number,
      'mcp_control_plane.mcp_server.id': record.mcp_server_id as string | null,
      'mcp_control_plane.user_toolbox.id': record.user_toolbox_id as string | null,
      'mcp_control_plane.connection.id': record.connection_id as string | null,
      'mcp_control_plane.connector.slug': record.connector_slug as string | null,
      'mcp_control_plane.upstream_tool.name': record.upstream_tool as string | null,
      'mcp_control_plane.synthetic_tool.id': record.synthetic_tool_id as string | null,
      'mcp_control_plane.request.id': record.request_id as string | null,
    });
  }
  if (record.type === 'audit') {
    const actor = record.actor as { type: string; id: string | null; user_id: string | null };
    const target = record.target as { type: string | null; id: string | null };
    return attributes({
      'user.id': actor.user_id,
      'client.address': record.ip as string | null,
      'user_agent.original': record.user_agent as string | null,
      ...common,
      'mcp_control_plane.audit.action': record.action as string,
      'mcp_control_plane.actor.type': actor.type,
      'mcp_control_plane.actor.id': actor.id,
      'mcp_control_plane.target.type': target.type,
      'mcp_control_plane.target.id': target.id,
      'mcp_control_plane.audit.changes': JSON.stringify(record.changes ?? {}),
      'mcp_control_plane.request.id': record.request_id as string | null,
    });
  }
  return attributes({ ...common, 'mcp_control_plane.test': true, 'mcp_control_plane.destination.id': record.destination_id as string });
}

function otlpLogRecord(record: ExportRecord): Record<string, unknown> {
  const time = unixNano(record.occurred_at);
  const log: Record<string, unknown> = {
    timeUnixNano: time,
    observedTimeUnixNano: time,
    severityNumber: failed(record) ? SEVERITY_ERROR : SEVERITY_INFO,
    severityText: failed(record) ? 'ERROR' : 'INFO',
    body: { stringValue: summary(record) },
    attributes: otlpAttributes(record),
  };
  const traceId = traceIdOf(record.request_id);
  if (traceId) log.traceId = traceId;
  return log;
}

function otlpRequest(target: Target, encodedLogRecords: readonly string[]): string {
  const resource = JSON.stringify({ attributes: attributes({ 'service.name': target.config.service ?? DEFAULT_NAME }) });
  const scope = JSON.stringify({ name: DEFAULT_NAME, version: SCOPE_VERSION });
  return `{"resourceLogs":[{"resource":${resource},"scopeLogs":[{"scope":${scope},"logRecords":[${encodedLogRecords.join(',')}]}]}]}`;
}

// ---------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------

const VENDOR: Readonly<Record<DestinationType, string>> = { http: 'The endpoint', datadog: 'Datadog', splunk_hec: 'Splunk', otlp_http: 'The collector' };

export type Verdict =
  | { kind: 'ok'; warning: string | null }
  /** Worth sending again later: the backend is busy or down, or refuses the credentials or has no such endpoint (which a person may fix). */
  | { kind: 'retry'; error: string; retryAfterMs: number | null }
  /** The backend refuses these records for good: sending them again would not help. */
  | { kind: 'drop'; error: string };

/** The backend's own short reason from its JSON answer (HEC `text`, OTLP `message`, Datadog `errors`), printable and short. */
function reasonOf(body: string): string | null {
  let parsed: any;
  try {
    parsed = JSON.parse(body);
  } catch {
    return null;
  }
  const first = Array.isArray(parsed?.errors) ? parsed.errors[0] : undefined;
  const reason = parsed?.text ?? parsed?.message ?? (typeof first === 'string' ? first : (first?.detail ?? first?.title));
  if (typeof reason !== 'string' || reason.trim() === '') return null;
  // A remote's words, shown to readers of the destination: printable characters only.
  return [...reason]
    .map((c) => (c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f ? ' ' : c))
    .join('')
    .replace(/ +/g, ' ')
    .trim()
    .slice(0, 200);
}

function retryAfterMs(header: string | string[] | undefined): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

/** What a backend's answer means for the batch it answered. */
export function verdictOf(
  type: DestinationType,
  status: number,
  statusText: string,
  headers: Record<string, string | string[] | undefined>,
  body: string,
  sent: number,
): Verdict {
  const reason = reasonOf(body);
  const said = `${VENDOR[type]} answered ${status}${statusText ? ` ${statusText}` : ''}${reason ? `: ${reason}` : ''}`;
  if (status >= 200 && status < 300) {
    if (type !== 'otlp_http') return { kind: 'ok', warning: null };
    // A 200 may still reject some records (partialSuccess); they must not be sent again.
    let partial: any;
    try {
      partial = JSON.parse(body)?.partialSuccess;
    } catch {
      partial = undefined;
    }
    const rejected = Number(partial?.rejectedLogRecords ?? 0);
    if (!Number.isFinite(rejected) || rejected <= 0) return { kind: 'ok', warning: null };
    const message = typeof partial?.errorMessage === 'string' && partial.errorMessage ? `: ${partial.errorMessage.slice(0, 200)}` : '';
    return { kind: 'ok', warning: `The collector rejected ${rejected} of ${sent} records${message}.` };
  }
  // 401, 403 and 404 say the settings are wrong (credentials, path), which a person fixes: the records wait for that.
  if (status === 408 || status === 429 || status >= 500 || status === 401 || status === 403 || status === 404) {
    return { kind: 'retry', error: said, retryAfterMs: retryAfterMs(headers['retry-after']) };
  }
  return { kind: 'drop', error: said };
}
