// The upstream MCP servers of scripts/bench/mcp-endpoint.ts, in a process of their own:
// BENCH_CONNECTIONS API-key upstreams (the test peers) on 127.0.0.1, each accepting only the key
// BENCH_UPSTREAM_KEY and serving `whoami`, `echo`, `sleep` (answers after `ms`, for calls still
// in flight when something stops) and BENCH_TOOLS generated tools. Prints their
// URLs as one JSON line on stdout ({"urls": [...]}) once all listen, then runs until killed.
import { startApiKeyUpstream } from '../../test/support/upstream/api-key';
import { manyTools, type UpstreamTool } from '../../test/support/upstream/mcp';

const CONNECTIONS = Math.min(20, Math.max(1, Number(process.env.BENCH_CONNECTIONS ?? 5)));
const TOOLS = Math.min(1000, Math.max(1, Number(process.env.BENCH_TOOLS ?? 100)));
const KEY = process.env.BENCH_UPSTREAM_KEY;

const SLEEP: UpstreamTool = {
  name: 'sleep',
  description: 'Answers `slept <ms>` after `ms` milliseconds (at most 30 000).',
  inputSchema: { type: 'object', properties: { ms: { type: 'number' } } },
  call: async (args) => {
    const ms = Math.min(30_000, Math.max(0, Number(args.ms ?? 0)));
    await new Promise((resolve) => setTimeout(resolve, ms));
    return { content: [{ type: 'text', text: `slept ${ms}` }] };
  },
};

async function main(): Promise<void> {
  if (!KEY) throw new Error('BENCH_UPSTREAM_KEY is required.');
  const tools = [...manyTools(TOOLS), SLEEP];
  const upstreams = await Promise.all(Array.from({ length: CONNECTIONS }, () => startApiKeyUpstream({ keys: { [KEY]: 'bench' }, tools })));
  process.stdout.write(`${JSON.stringify({ urls: upstreams.map((u) => u.url) })}\n`);
  const stop = () => {
    void Promise.all(upstreams.map((u) => u.close())).finally(() => process.exit(0));
    // Whatever keeps a connection open does not keep this process.
    setTimeout(() => process.exit(0), 2_000).unref();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`upstream peers: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
