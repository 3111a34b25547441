// The MCP endpoint bench's floor: a bare Express 5 server that parses a JSON-RPC POST, forwards
// it to one upstream MCP server with the upstream's key over a kept-alive connection, and sends
// the upstream's answer back. No authentication, no toolbox or policy, no guard, no record: the
// least any Express gateway between a client and the upstream adds on this machine.
// Run by scripts/bench/mcp-endpoint.ts as its own process; listens on 127.0.0.1:$PORT.
import http from 'node:http';
import express from 'express';

const port = Number(process.env.PORT ?? 0);
const upstream = new URL(process.env.UPSTREAM_URL ?? '');
const key = process.env.UPSTREAM_KEY ?? '';
const agent = new http.Agent({ keepAlive: true });

const app = express();
app.use(express.json());
app.post('/mcp', (req, res) => {
  const body = Buffer.from(JSON.stringify(req.body));
  const forwarded = http.request(
    upstream,
    {
      method: 'POST',
      agent,
      headers: {
        'content-type': 'application/json',
        'content-length': body.length,
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${key}`,
        'mcp-protocol-version': String(req.headers['mcp-protocol-version'] ?? '2025-06-18'),
      },
    },
    (answer) => {
      const chunks: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => chunks.push(chunk));
      answer.on('end', () => {
        res
          .status(answer.statusCode ?? 502)
          .type(answer.headers['content-type'] ?? 'application/json')
          .send(Buffer.concat(chunks));
      });
    },
  );
  forwarded.on('error', () => res.status(502).end());
  forwarded.end(body);
});

const server = app.listen(port, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening on ${typeof address === 'object' && address ? address.port : port}\n`);
});

// Exits rather than dies on SIGTERM, so that --cpu-prof (BENCH_PROFILE_OUT) writes its profile.
process.once('SIGTERM', () => process.exit(0));
