// `npx tsx scripts/bench/logging-delivery.ts`: how many records per second logging
// destinations deliver. The app on loopback over a scratch database (DATABASE_URL, else the
// embedded one; BENCH_POSTGRES=1: a scratch database made on the server at BENCH_DATABASE_URL,
// default postgres://postgres@127.0.0.1:5432/postgres, dropped at the end) writes BENCH_RECORDS tool-call records (default 20,000) through the MCP
// runtime's record writer, for an organization with one destination of a type at a time
// (http, datadog, splunk_hec, otlp_http) pointed at a loopback backend that checks its wire
// format (test/support/log-receivers.ts); then the outbox worker runs rounds back to back, as
// the server does while a backlog lasts, until every record has been accepted. Prints, per
// type: the time to write the records (with their outbox rows), the time to deliver them, and
// records per second delivered; then all four types at once.
import { DEFAULT_LOGGING_DELIVERY, loggingDeliveries } from '../../src/areas/logging-destinations/logging-destinations.consumer';
import type { DestinationType } from '../../src/areas/logging-destinations/logging-destinations.formats';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from '../../src/events/outbox';
import { newId } from '../../src/lib/ids';
import type { AppDeps } from '../../src/http/context';
import { startLogBackend, type LogBackend } from '../../test/support/log-receivers';
import { createScratchDatabase, type ScratchDatabase } from './scratch-database';
import { startBenchApp } from './support';

const RECORDS = Math.min(1_000_000, Math.max(100, Number(process.env.BENCH_RECORDS ?? 20_000)));
/** Events the outbox hands over per round (`BENCH_OUTBOX_BATCH`, default the server's). */
const OUTBOX_BATCH = Math.max(1, Number(process.env.BENCH_OUTBOX_BATCH ?? DEFAULT_OUTBOX_OPTIONS.batchSize));
const TYPES: DestinationType[] = ['http', 'datadog', 'splunk_hec', 'otlp_http'];
const SECRET = 'bench-secret-0123456789abcdef';

async function main() {
  let scratch: ScratchDatabase | null = null;
  if (process.env.BENCH_POSTGRES === '1') {
    scratch = await createScratchDatabase();
    process.env.DATABASE_URL = scratch.url;
  }
  const backends = {} as Record<DestinationType, LogBackend>;
  for (const type of TYPES) backends[type] = await startLogBackend(type, { secret: SECRET });
  const app = await startBenchApp({ OUTBOUND_ALLOW_LOOPBACK: 'true', DATADOG_LOGS_INTAKE_URL: `${backends.datadog.url}/{site}/api/v2/logs` });
  const deps = app.deps as unknown as AppDeps;
  const db = app.database.db;
  const results: string[] = [];
  try {
    const run = async (label: string, types: DestinationType[]) => {
      const org = await app.factories.org();
      await db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', org.orgId).execute();
      for (const type of types) {
        const config =
          type === 'datadog'
            ? { site: 'datadoghq.com', api_key: SECRET }
            : type === 'splunk_hec'
              ? { url: `${backends.splunk_hec.url}/services/collector/event`, hec_token: SECRET }
              : { url: `${backends[type].url}/${type === 'otlp_http' ? 'v1/logs' : 'ingest'}` };
        const res = await fetch(`${app.base}/observability-destination`, {
          method: 'POST',
          headers: { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId, 'content-type': 'application/json' },
          body: JSON.stringify({ name: `Bench ${type}`, type, config, record_types: ['tool_call'] }),
        });
        if (res.status !== 201) throw new Error(`create ${type}: ${res.status} ${await res.text()}`);
      }
      const received = () => types.reduce((sum, type) => sum + backends[type].records.length, 0);
      const before = received();

      const writeStart = performance.now();
      for (let i = 0; i < RECORDS; i++) {
        deps.mcp.toolCalls.record({
          org_id: org.orgId,
          mcp_server_id: newId('mcpServer'),
          user_id: org.ownerId,
          user_toolbox_id: 'utbx_dyn_all',
          connection_id: newId('connection'),
          connector_slug: 'crm',
          synthetic_tool_id: null,
          tool_name: `crm__search_${i % 50}`,
          upstream_tool: `search_${i % 50}`,
          outcome: i % 20 === 0 ? 'tool_error' : 'succeeded',
          error: i % 20 === 0 ? 'upstream says no' : null,
          duration_ms: 5 + (i % 300),
          request_id: `req_${newId('event').slice(4)}`,
          jsonrpc_id: String(i),
          created_at: new Date(),
        });
      }
      await deps.mcp.toolCalls.flush();
      const writeMs = performance.now() - writeStart;

      const consumer = loggingDeliveries(deps, DEFAULT_LOGGING_DELIVERY);
      const dispatcher = new OutboxDispatcher(db, [consumer], deps.logger, { ...DEFAULT_OUTBOX_OPTIONS, batchSize: OUTBOX_BATCH });
      const expected = RECORDS * types.length;
      const start = performance.now();
      for (let round = 0; received() - before < expected; round++) {
        const r = await dispatcher.runOnce();
        // Rounds go on while records are handed over; delivery runs in the background meanwhile.
        if (r.fannedOut === 0) await consumer.settled();
        if (round > 1_000_000) throw new Error('no progress');
      }
      await consumer.settled();
      const seconds = (performance.now() - start) / 1000;
      const requests = types.reduce((sum, type) => sum + backends[type].requests.filter((q) => q.status < 300).length, 0);
      results.push(
        `${label.padEnd(22)} ${String(expected).padStart(8)} records  written in ${(writeMs / 1000).toFixed(2)} s  delivered in ${seconds.toFixed(2)} s  ${Math.round(
          expected / seconds,
        )
          .toString()
          .padStart(7)} records/s  (${requests} requests so far)`,
      );
      console.log(results.at(-1));
    };
    console.log(
      `${RECORDS} tool-call records per destination, outbox batches of ${OUTBOX_BATCH}, ${process.env.DATABASE_URL ? 'PostgreSQL at DATABASE_URL' : 'embedded PostgreSQL'}`,
    );
    for (const type of TYPES) await run(type, [type]);
    await run('all four at once', TYPES);
  } finally {
    await app.close();
    for (const type of TYPES) await backends[type].close();
    await scratch?.drop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
