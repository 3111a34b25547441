import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import {
  context,
  diag,
  DiagLogLevel,
  defaultTextMapGetter,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace';

export interface TracingConfig {
  /** Where spans are posted (OTLP/HTTP, JSON); null: tracing is off. */
  endpoint: string | null;
  headers: Readonly<Record<string, string>>;
  serviceName: string;
  sampler: 'always_on' | 'always_off' | 'traceidratio' | 'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio';
  /** For the ratio samplers: the share of new traces kept. */
  ratio: number;
  /** How long ended spans wait to be sent in one batch. */
  scheduleDelayMs: number;
}

export { SpanKind };
export type { Span, Attributes };

const propagator = new W3CTraceContextPropagator();

/**
 * Whether any app in this process traces. Outbound requests ask it before they look for a span
 * to propagate, so that without tracing nothing is added to their path but this test.
 */
let anyTracing = false;

/**
 * Enables the async-context manager once per process: spans follow a request through its
 * awaits without being passed along. Only the context is global; each app has its own provider.
 */
function enableContext(): void {
  if (anyTracing) return;
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  anyTracing = true;
}

function samplerOf(config: TracingConfig): Sampler {
  const ratio = new TraceIdRatioBasedSampler(config.ratio);
  switch (config.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio;
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio });
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/**
 * An app's traces (OpenTelemetry, sent over OTLP/HTTP), one provider per app: tests run many
 * apps in one process, and the API's global provider is one per process. Off (no endpoint
 * configured), every method is a no-op that creates nothing, and nothing is propagated.
 * Attributes name operations, routes, methods and tools, never arguments, tokens or secrets.
 */
export class Tracing {
  private readonly provider: TracerProvider | null;
  private readonly tracer: Tracer | null;

  constructor(config: TracingConfig, version: string, logger?: Logger) {
    if (config.endpoint === null) {
      this.provider = null;
      this.tracer = null;
      return;
    }
    enableContext();
    // The SDK reports a collector that refuses or cannot be reached through its diagnostic
    // logger, silent by default: an operator would see no spans and no reason.
    if (logger) {
      const warn = (message: string) => logger.warn({ endpoint: config.endpoint }, `traces: ${message.slice(0, 500)}`);
      const quiet = () => undefined;
      diag.setLogger({ error: warn, warn, info: quiet, debug: quiet, verbose: quiet }, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
    }
    const exporter = new OTLPTraceExporter({ url: config.endpoint, headers: { ...config.headers } });
    this.provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': config.serviceName, 'service.version': version }),
      sampler: samplerOf(config),
      spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: config.scheduleDelayMs })],
    });
    this.tracer = this.provider.getTracer('mcp-control-plane', version);
  }

  get enabled(): boolean {
    return this.tracer !== null;
  }

  /**
   * The SERVER span of an incoming request, continuing the caller's trace when its
   * `traceparent` is valid (W3C Trace Context), and the context to run the request in; null when off.
   */
  serverSpan(headers: IncomingHttpHeaders, method: string, attributes: Attributes): { span: Span; context: Context } | null {
    if (!this.tracer) return null;
    const parent = headers.traceparent === undefined ? ROOT_CONTEXT : propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
    const span = this.tracer.startSpan(method, { kind: SpanKind.SERVER, attributes }, parent);
    return { span, context: trace.setSpan(parent, span) };
  }

  /**
   * Runs `work` in a span, a child of the span current where it is called (or of `remoteParent`,
   * a `traceparent` an MCP message carried in its `_meta`); the span ends when `work` settles.
   * Off: `work` runs with no span.
   */
  async inSpan<T>(
    name: string,
    options: { kind: SpanKind; attributes: Attributes; remoteParent?: { traceparent?: unknown; tracestate?: unknown } },
    work: (span: Span | null) => Promise<T>,
  ): Promise<T> {
    if (!this.tracer) return work(null);
    let parent = context.active();
    const carried = options.remoteParent;
    if (carried && typeof carried.traceparent === 'string') {
      const extracted = propagator.extract(ROOT_CONTEXT, carried, defaultTextMapGetter);
      if (trace.getSpanContext(extracted)) parent = extracted;
    }
    const span = this.tracer.startSpan(name, { kind: options.kind, attributes: options.attributes }, parent);
    try {
      return await context.with(trace.setSpan(parent, span), () => work(span));
    } catch (err) {
      span.setAttribute('error.type', err instanceof Error ? err.name : 'unknown');
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw err;
    } finally {
      span.end();
    }
  }

  /** Sends what is waiting (graceful stop) and stops exporting. */
  async shutdown(): Promise<void> {
    await this.provider?.shutdown();
  }

  /** Sends what is waiting now, and keeps exporting. */
  async flush(): Promise<void> {
    await this.provider?.forceFlush();
  }
}

/** Marks a span failed with the semantic conventions' `error.type`. */
export function failed(span: Span | null, errorType: string): void {
  if (!span) return;
  span.setAttribute('error.type', errorType);
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/**
 * Adds `traceparent` (and `tracestate`) of the span current here to outgoing headers (W3C
 * Trace Context); nothing when no span is current, which is always the case with tracing off.
 */
export function injectTraceContext(headers: Record<string, string>): void {
  if (!anyTracing) return;
  const active = context.active();
  if (!trace.getSpanContext(active)) return;
  propagator.inject(active, headers, defaultTextMapSetter);
}

/**
 * The same, for an MCP request's `params._meta`, where MCP reserves `traceparent` and
 * `tracestate` for W3C Trace Context; undefined when no span is current.
 */
export function traceContextMeta(): Record<string, string> | undefined {
  if (!anyTracing) return undefined;
  const carrier: Record<string, string> = {};
  injectTraceContext(carrier);
  return carrier.traceparent ? carrier : undefined;
}
