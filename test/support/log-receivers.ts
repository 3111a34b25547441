import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

/*
 * Log backends on loopback, each checking the requests it gets as its vendor documents them
 * and answering as the vendor does: a Splunk HTTP Event Collector, a Datadog logs intake
 * (v2), an OpenTelemetry collector's OTLP/HTTP logs endpoint (JSON), and a plain HTTPS JSON
 * receiver. A test can script outages (the next answers) and hold answers back.
 */

export type BackendKind = 'http' | 'splunk_hec' | 'datadog' | 'otlp_http';

export interface ReceivedLogRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  /** The bytes as they arrived. */
  raw: Buffer;
  /** The body as text, gunzipped when it was sent compressed. */
  text: string;
  /** What the backend answered. */
  status: number;
  /** The records the backend accepted from it, in order (the `event` of HEC events, Datadog entries, OTLP log records, the array's items). */
  records: any[];
}

interface Answer {
  status: number;
  body: string;
  headers?: Record<string, string>;
}

export interface BackendOptions {
  /** Splunk: the HEC token; Datadog: the API key. Anything else is refused. */
  secret?: string;
  /** Splunk: the token has indexer acknowledgment on (a channel header is then required). */
  ack?: boolean;
  /** OTLP: reject this many records of each request (partialSuccess). */
  rejectPerRequest?: number;
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}): Answer => ({ status, body: JSON.stringify(body), headers });

/** Splits HEC's batch format (JSON objects one after another, optionally whitespace between) into its objects. */
export function splitConcatenatedJson(text: string): unknown[] {
  const out: unknown[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '{') {
      if (depth === 0) start = i;
      depth++;
    } else if (c === '}') {
      depth--;
      if (depth === 0) out.push(JSON.parse(text.slice(start, i + 1)));
      if (depth < 0) throw new Error('unbalanced');
    } else if (depth === 0 && !/\s/.test(c as string)) throw new Error(`unexpected ${c} between events`);
  }
  if (depth !== 0 || inString) throw new Error('truncated');
  return out;
}

function splunk(req: http.IncomingMessage, raw: Buffer, options: BackendOptions): { answer: Answer; records: any[] } {
  const auth = req.headers.authorization;
  if (!auth) return { answer: json(401, { text: 'Token is required', code: 2 }), records: [] };
  if (auth !== `Splunk ${options.secret}`) return { answer: json(403, { text: 'Invalid token', code: 4 }), records: [] };
  if (options.ack && !req.headers['x-splunk-request-channel']) return { answer: json(400, { text: 'Data channel is missing', code: 10 }), records: [] };
  let events: any[];
  try {
    events = splitConcatenatedJson(raw.toString('utf8')) as any[];
  } catch {
    return { answer: json(400, { text: 'Invalid data format', code: 6 }), records: [] };
  }
  if (events.length === 0) return { answer: json(400, { text: 'No data', code: 5 }), records: [] };
  for (const e of events) {
    if (typeof e !== 'object' || e === null || Array.isArray(e) || !('event' in e))
      return { answer: json(400, { text: 'Event field is required', code: 12 }), records: [] };
    if ('time' in e && typeof e.time !== 'number') return { answer: json(400, { text: 'Invalid data format', code: 6 }), records: [] };
  }
  return { answer: json(200, options.ack ? { text: 'Success', code: 0, ackId: 1 } : { text: 'Success', code: 0 }), records: events };
}

const DD_MAX_PAYLOAD = 5 * 1024 * 1024;
const DD_MAX_ENTRY = 1024 * 1024;

function datadog(req: http.IncomingMessage, raw: Buffer, options: BackendOptions): { answer: Answer; records: any[]; text: string } {
  if (req.headers['dd-api-key'] !== options.secret) return { answer: json(403, { errors: ['Forbidden'] }), records: [], text: '' };
  let text: string;
  try {
    text = (req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8');
  } catch {
    return { answer: json(400, { errors: ['Bad Request'] }), records: [], text: '' };
  }
  if (Buffer.byteLength(text) > DD_MAX_PAYLOAD) return { answer: json(413, { errors: ['Payload too large'] }), records: [], text };
  let entries: unknown;
  try {
    entries = JSON.parse(text);
  } catch {
    return { answer: json(400, { errors: ['Bad Request'] }), records: [], text };
  }
  const list = Array.isArray(entries) ? entries : [entries];
  if (list.length > 1000) return { answer: json(413, { errors: ['Too many entries'] }), records: [], text };
  if (list.some((e) => Buffer.byteLength(JSON.stringify(e)) > DD_MAX_ENTRY)) return { answer: json(413, { errors: ['Log too large'] }), records: [], text };
  return { answer: json(202, {}), records: list, text };
}

/** The checks of the OTLP JSON mapping a collector's decoder makes of log records. */
function otlpProblem(body: any): string | null {
  if (!Array.isArray(body?.resourceLogs)) return 'resourceLogs must be an array';
  for (const rl of body.resourceLogs) {
    if (!Array.isArray(rl.scopeLogs)) return 'scopeLogs must be an array';
    for (const attr of rl.resource?.attributes ?? []) if (anyValueProblem(attr)) return anyValueProblem(attr);
    for (const sl of rl.scopeLogs) {
      if (!Array.isArray(sl.logRecords)) return 'logRecords must be an array';
      for (const lr of sl.logRecords) {
        if (typeof lr.timeUnixNano !== 'string' || !/^\d+$/.test(lr.timeUnixNano)) return 'timeUnixNano must be a decimal string';
        if (lr.observedTimeUnixNano !== undefined && !/^\d+$/.test(String(lr.observedTimeUnixNano))) return 'observedTimeUnixNano must be a decimal string';
        if (!Number.isInteger(lr.severityNumber)) return 'severityNumber must be an integer';
        if (lr.traceId !== undefined && !/^[0-9a-f]{32}$/.test(lr.traceId)) return 'traceId must be 32 hex digits';
        if (lr.spanId !== undefined && !/^[0-9a-f]{16}$/.test(lr.spanId)) return 'spanId must be 16 hex digits';
        for (const attr of lr.attributes ?? []) if (anyValueProblem(attr)) return anyValueProblem(attr);
      }
    }
  }
  return null;
}

export function anyValueProblem(attr: any): string | null {
  if (typeof attr?.key !== 'string') return 'attribute without key';
  const kinds = Object.keys(attr.value ?? {});
  if (kinds.length !== 1) return `attribute ${attr.key} must have one value`;
  const [kind] = kinds;
  const value = attr.value[kind as string];
  if (kind === 'intValue' && !(typeof value === 'string' && /^-?\d+$/.test(value))) return `attribute ${attr.key}: intValue must be a decimal string`;
  if (kind === 'stringValue' && typeof value !== 'string') return `attribute ${attr.key}: stringValue must be a string`;
  if (kind === 'boolValue' && typeof value !== 'boolean') return `attribute ${attr.key}: boolValue must be a boolean`;
  if (!['intValue', 'stringValue', 'boolValue', 'doubleValue', 'arrayValue', 'kvlistValue', 'bytesValue'].includes(kind as string))
    return `attribute ${attr.key}: unknown ${kind}`;
  return null;
}

function otlp(req: http.IncomingMessage, raw: Buffer, options: BackendOptions): { answer: Answer; records: any[] } {
  if (!String(req.headers['content-type']).startsWith('application/json'))
    return { answer: json(415, { code: 3, message: 'unsupported content type' }), records: [] };
  let body: any;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return { answer: json(400, { code: 3, message: 'invalid JSON' }), records: [] };
  }
  const problem = otlpProblem(body);
  if (problem) return { answer: json(400, { code: 3, message: problem }), records: [] };
  const records = body.resourceLogs.flatMap((rl: any) =>
    rl.scopeLogs.flatMap((sl: any) => sl.logRecords.map((lr: any) => ({ ...lr, resource: rl.resource, scope: sl.scope }))),
  );
  const rejected = Math.min(options.rejectPerRequest ?? 0, records.length);
  const answer = rejected > 0 ? json(200, { partialSuccess: { rejectedLogRecords: String(rejected), errorMessage: 'log record too old' } }) : json(200, {});
  return { answer, records: records.slice(rejected) };
}

function plain(req: http.IncomingMessage, raw: Buffer): { answer: Answer; records: any[] } {
  if (req.headers['content-type'] !== 'application/json') return { answer: { status: 415, body: 'json only' }, records: [] };
  try {
    const body = JSON.parse(raw.toString('utf8'));
    if (!Array.isArray(body)) return { answer: { status: 400, body: 'an array please' }, records: [] };
    return { answer: { status: 200, body: 'ok' }, records: body };
  } catch {
    return { answer: { status: 400, body: 'not json' }, records: [] };
  }
}

export async function startLogBackend(kind: BackendKind, options: BackendOptions = {}) {
  const requests: ReceivedLogRequest[] = [];
  const scripted: Answer[] = [];
  let gate: Promise<void> | null = null;
  let openGate: (() => void) | null = null;
  let arrivals = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      arrivals += 1;
      const answerNow = () => {
        const raw = Buffer.concat(chunks);
        let outcome: { answer: Answer; records: any[]; text?: string };
        const next = scripted.shift();
        if (next) outcome = { answer: next, records: [] };
        else if (kind === 'splunk_hec') outcome = splunk(req, raw, options);
        else if (kind === 'datadog') outcome = datadog(req, raw, options);
        else if (kind === 'otlp_http') outcome = otlp(req, raw, options);
        else outcome = plain(req, raw);
        const text = outcome.text ?? (req.headers['content-encoding'] === 'gzip' ? safeGunzip(raw) : raw.toString('utf8'));
        requests.push({ path: req.url ?? '', headers: req.headers, raw, text, status: outcome.answer.status, records: outcome.records });
        res.writeHead(outcome.answer.status, { 'content-type': 'application/json', ...outcome.answer.headers }).end(outcome.answer.body);
      };
      if (gate) void gate.then(answerNow);
      else answerNow();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    /** Every record accepted so far, in the order they arrived. */
    get records(): any[] {
      return requests.flatMap((r) => r.records);
    },
    /** Requests that have arrived, answered or not. */
    get arrivals() {
      return arrivals;
    },
    /** The next `times` requests get this answer instead of the backend's own. */
    failNext(answer: Answer, times = 1) {
      for (let i = 0; i < times; i++) scripted.push(answer);
    },
    /** Holds every answer back until release(). */
    hold() {
      gate = new Promise<void>((resolve) => (openGate = resolve));
    },
    release() {
      openGate?.();
      gate = null;
    },
    close: () =>
      new Promise<void>((resolve) => {
        openGate?.();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function safeGunzip(raw: Buffer): string {
  try {
    return gunzipSync(raw).toString('utf8');
  } catch {
    return '';
  }
}

export type LogBackend = Awaited<ReturnType<typeof startLogBackend>>;
