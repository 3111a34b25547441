// `npx tsx scripts/bench/connection-tools.ts`: what GET /connection/{id}/tools costs against
// calling the upstream MCP server directly with the SDK client, in one run on loopback.
//
//   direct  the SDK Client over Streamable HTTP with the key, as any MCP client: initialize,
//           tools/list (every page), end of session. The floor for a cold answer.
//   cold    GET /connection/{id}/tools with the cache emptied before each request: the server
//           resolves the connector, opens the key, and does what `direct` does through the
//           outbound guard, then stores the list and answers a page.
//   warm    the same request answered from the cache (CONNECTION_TOOLS_TTL_SECONDS).
//
// Requests are sequential (one at a time): a latency figure, not a throughput one. The app
// runs in this process on an embedded database (or DATABASE_URL's), the upstream is the test
// peers' API-key MCP server (SDK McpServer, stateless Streamable HTTP).
//
// Settings: BENCH_COUNT requests per target (default 200, at most 5000), BENCH_TOOLS tools
// the upstream offers (default 40, in pages of 20).
import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startApiKeyUpstream } from '../../test/support/upstream/api-key';
import { manyTools } from '../../test/support/upstream/mcp';
import { addApiKeyConnector, COUNT, measure, startBenchApp } from './support';

const TOOLS = Math.min(2000, Math.max(1, Number(process.env.BENCH_TOOLS ?? 40)));
const KEY = `bench-${randomBytes(8).toString('hex')}`;

async function main() {
  const upstream = await startApiKeyUpstream({ keys: { [KEY]: 'bench' }, tools: manyTools(TOOLS), pageSize: 20 });
  const { database, base, factories, close } = await startBenchApp({ OUTBOUND_ALLOW_LOOPBACK: 'true', CONNECTION_TOOLS_TTL_SECONDS: '3600' });
  const org = await factories.org();
  const mcpUrl = `${new URL(upstream.url).origin}/mcp`;
  await addApiKeyConnector(database.db, org.orgId, 'bench-crm', 'Bench CRM', mcpUrl);
  const headers = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId, 'content-type': 'application/json' };
  const created = await fetch(`${base}/connection`, { method: 'POST', headers, body: JSON.stringify({ connector_slug: 'bench-crm', api_key: KEY }) });
  if (created.status !== 201) throw new Error(`createConnection answered ${created.status}: ${await created.text()}`);
  const { id } = (await created.json()) as { id: string };

  const listViaApi = async () => {
    const res = await fetch(`${base}/connection/${id}/tools?limit=50`, { headers });
    if (res.status !== 200) throw new Error(`listConnectionTools answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  };
  const emptyCache = async () => {
    await database.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
  };
  const direct = async () => {
    const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { authorization: `Bearer ${KEY}` } } });
    const client = new Client({ name: 'bench', version: '0' }, { capabilities: {} });
    await client.connect(transport);
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      cursor = page.nextCursor;
    } while (cursor);
    await client.close();
  };

  const results = [
    { label: 'direct (SDK client → upstream)', ...(await measure(direct)) },
    { label: 'cold (API, cache empty)', ...(await measure(listViaApi, emptyCache)) },
    { label: 'warm (API, from cache)', ...(await measure(listViaApi)) },
  ];
  const floor = results[0]!.p50;
  console.log(
    `listConnectionTools, ${COUNT} sequential requests per target, upstream with ${TOOLS} tools in pages of 20, ${process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded PGlite'}:`,
  );
  for (const r of results) {
    console.log(
      `  ${r.label.padEnd(34)} p50 ${r.p50.toFixed(2).padStart(7)} ms   p90 ${r.p90.toFixed(2).padStart(7)} ms   p99 ${r.p99.toFixed(2).padStart(7)} ms   p50 ${(r.p50 / floor).toFixed(2)}× direct`,
    );
  }

  await close();
  await upstream.close();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
