import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import { classifyAddress, OutboundRefused, OutboundSession } from '../../src/outbound/client';

/*
 * The guarded fetch the MCP SDK and the OAuth client go through: a real HTTP server on
 * loopback answers slowly, too much, with redirects, and through a host name that resolves
 * to loopback.
 */

let server: http.Server;
let base: string;
beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (req.url === '/big') return res.end('x'.repeat(10_000));
    if (req.url === '/slow') {
      const timer = setTimeout(() => res.end('late'), 2_000);
      return void res.on('close', () => clearTimeout(timer));
    }
    if (req.url === '/drip') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const timer = setInterval(() => res.write('data: tick\n\n'), 50);
      return void res.on('close', () => clearInterval(timer));
    }
    if (req.url === '/redirect') return res.writeHead(302, { location: 'http://169.254.169.254/latest' }).end();
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ method: req.method, body, auth: req.headers.authorization ?? null })),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const open = { allowLoopback: true, allowPrivate: false };

it('sends and answers like fetch, bodies and headers included', async () => {
  const session = new OutboundSession({ policy: open, timeoutMs: 2_000, maxBytes: 10_000 });
  const res = await session.fetch(`${base}/echo`, { method: 'POST', headers: { authorization: 'Bearer x' }, body: new URLSearchParams({ a: '1' }) });
  expect(await res.json()).toEqual({ method: 'POST', body: 'a=1', auth: 'Bearer x' });
  session.close();
});

it('refuses loopback unless the policy allows it, also behind a host name', async () => {
  const strict = new OutboundSession({ policy: { allowLoopback: false, allowPrivate: false }, timeoutMs: 2_000, maxBytes: 10_000 });
  await expect(strict.fetch(`${base}/echo`)).rejects.toBeInstanceOf(OutboundRefused);
  // The machine's own name resolves to one of its addresses: refused when the connection is made.
  const name = hostname();
  const address = await lookup(name).then(
    (r) => r.address,
    () => null,
  );
  if (address && classifyAddress(address) !== 'public') {
    const port = (server.address() as AddressInfo).port;
    await expect(strict.fetch(`http://${name}:${port}/echo`)).rejects.toBeInstanceOf(OutboundRefused);
  }
  strict.close();
});

it('caps what is read over the whole session', async () => {
  const session = new OutboundSession({ policy: open, timeoutMs: 2_000, maxBytes: 1_000 });
  const res = await session.fetch(`${base}/big`);
  await expect(res.text()).rejects.toBeInstanceOf(OutboundRefused);
  session.close();
});

it('has one deadline for everything, a slow answer and a stream that never ends alike', async () => {
  const slow = new OutboundSession({ policy: open, timeoutMs: 200, maxBytes: 10_000 });
  const started = Date.now();
  await expect(slow.fetch(`${base}/slow`)).rejects.toBeInstanceOf(OutboundRefused);
  expect(Date.now() - started).toBeLessThan(1_500);
  const drip = new OutboundSession({ policy: open, timeoutMs: 300, maxBytes: 1_000_000 });
  const res = await drip.fetch(`${base}/drip`);
  expect(res.status).toBe(200);
  await expect(res.text()).rejects.toBeInstanceOf(OutboundRefused);
  slow.close();
  drip.close();
});

it('follows no redirect', async () => {
  const session = new OutboundSession({ policy: open, timeoutMs: 2_000, maxBytes: 10_000 });
  const res = await session.fetch(`${base}/redirect`);
  expect(res.status).toBe(302);
  session.close();
});
