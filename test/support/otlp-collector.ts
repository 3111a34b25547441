import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { anyValueProblem } from './log-receivers';

/*
 * An OpenTelemetry collector's OTLP/HTTP traces endpoint (`POST /v1/traces`, JSON) on
 * loopback: it checks each request as a collector's JSON decoder does (ids in hex, times as
 * decimal strings, typed attribute values) and answers 400 otherwise, and keeps the spans.
 */

/** A span as received, its attributes flattened to plain values and its resource's beside it. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  attributes: Record<string, unknown>;
  status: { code?: number; message?: string };
  resource: Record<string, unknown>;
  scope: { name?: string; version?: string };
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

function plainValue(value: any): unknown {
  if ('stringValue' in value) return value.stringValue;
  if ('intValue' in value) return Number(value.intValue);
  if ('doubleValue' in value) return value.doubleValue;
  if ('boolValue' in value) return value.boolValue;
  if ('arrayValue' in value) return (value.arrayValue.values ?? []).map(plainValue);
  return value;
}

const flatten = (attributes: any[] | undefined) => Object.fromEntries((attributes ?? []).map((a) => [a.key, plainValue(a.value)]));

/** As the logs receiver checks them, but an intValue may also be a JSON integer: proto3's JSON mapping accepts both for int64, and the JS exporter sends numbers. */
function attributeProblem(attr: any): string | null {
  if (attr?.value && Number.isSafeInteger(attr.value.intValue)) return null;
  return anyValueProblem(attr);
}

function problemOf(body: any): string | null {
  if (!Array.isArray(body?.resourceSpans)) return 'resourceSpans must be an array';
  for (const rs of body.resourceSpans) {
    for (const attr of rs.resource?.attributes ?? []) if (attributeProblem(attr)) return attributeProblem(attr);
    if (!Array.isArray(rs.scopeSpans)) return 'scopeSpans must be an array';
    for (const ss of rs.scopeSpans) {
      if (!Array.isArray(ss.spans)) return 'spans must be an array';
      for (const span of ss.spans) {
        if (!/^[0-9a-f]{32}$/.test(span.traceId)) return 'traceId must be 32 hex digits';
        if (!/^[0-9a-f]{16}$/.test(span.spanId)) return 'spanId must be 16 hex digits';
        if (span.parentSpanId !== undefined && span.parentSpanId !== '' && !/^[0-9a-f]{16}$/.test(span.parentSpanId))
          return 'parentSpanId must be 16 hex digits';
        for (const field of ['startTimeUnixNano', 'endTimeUnixNano']) if (!/^\d+$/.test(String(span[field]))) return `${field} must be a decimal string`;
        if (!Number.isInteger(span.kind)) return 'kind must be an integer';
        if (typeof span.name !== 'string' || span.name === '') return 'name must be a non-empty string';
        for (const attr of span.attributes ?? []) if (attributeProblem(attr)) return attributeProblem(attr);
      }
    }
  }
  return null;
}

export async function startOtlpCollector() {
  const spans: ReceivedSpan[] = [];
  const requests: { path: string; headers: http.IncomingHttpHeaders; text: string; status: number }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const text = (req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8');
      const answer = (status: number, body: unknown) => {
        requests.push({ path: req.url ?? '', headers: req.headers, text, status });
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      };
      if (req.method !== 'POST' || req.url !== '/v1/traces') return answer(404, { code: 5, message: 'not found' });
      if (!String(req.headers['content-type']).startsWith('application/json')) return answer(415, { code: 3, message: 'unsupported content type' });
      let body: any;
      try {
        body = JSON.parse(text);
      } catch {
        return answer(400, { code: 3, message: 'invalid JSON' });
      }
      const problem = problemOf(body);
      if (problem) return answer(400, { code: 3, message: problem });
      for (const rs of body.resourceSpans)
        for (const ss of rs.scopeSpans)
          for (const span of ss.spans)
            spans.push({
              traceId: span.traceId,
              spanId: span.spanId,
              parentSpanId: span.parentSpanId ?? '',
              name: span.name,
              kind: span.kind,
              attributes: flatten(span.attributes),
              status: span.status ?? {},
              resource: flatten(rs.resource?.attributes),
              scope: ss.scope ?? {},
            });
      answer(200, {});
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    /** The base endpoint (OTEL_EXPORTER_OTLP_ENDPOINT): spans go to `/v1/traces` under it. */
    url: `http://127.0.0.1:${port}`,
    spans,
    requests,
    /** Waits until a span matches (the exporter sends in batches, after its schedule delay), up to `ms`. */
    async waitFor(match: (span: ReceivedSpan) => boolean, ms = 10_000): Promise<ReceivedSpan> {
      const deadline = Date.now() + ms;
      for (;;) {
        const found = spans.find(match);
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`No span matched within ${ms} ms; received: ${spans.map((s) => s.name).join(', ') || 'none'}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type OtlpCollector = Awaited<ReturnType<typeof startOtlpCollector>>;
