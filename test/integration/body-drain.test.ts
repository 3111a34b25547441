// A client writes its whole body before it reads the answer. A body refused for its size is
// drained (within DRAIN_MAX_BYTES and DRAIN_MAX_MS) before the 413 is sent, so that a real HTTP
// client sending 12 MiB reads the 413 instead of failing with EPIPE or ECONNRESET.
import http from 'node:http';
import { DRAIN_MAX_BYTES } from '../../src/http/body';
import { startTestApp, type TestApp } from '../support/app';

const BODY_BYTES = 12 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 0x20);

let t: TestApp;
let apiHeaders: Record<string, string>;
let mcpPath: string;
let mcpHeaders: Record<string, string>;
beforeAll(async () => {
  t = await startTestApp();
  const org = await t.factories.org();
  const token = await t.factories.token(org.orgId, await t.factories.member(org.orgId));
  apiHeaders = { authorization: `Bearer ${token}`, 'x-organization-id': org.orgId };
  const created = await t.as({ token, org: org.orgId }).post('/user-toolbox/utbx_dyn_all/mcp', { name: 'drain' });
  mcpPath = `/mcp/${created.body.mcp_server.id}`;
  mcpHeaders = { authorization: `Bearer ${created.body.token}`, accept: 'application/json, text/event-stream' };
});
afterAll(() => t.close());

/**
 * POSTs BODY_BYTES with node:http, writing as fast as the server reads, and reads the answer.
 * Settles once the body is written and the answer read: a write that fails (EPIPE, ECONNRESET),
 * as when the server closes while bytes are still coming, fails it.
 */
function postLarge(path: string, headers: Record<string, string>): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    let answer: { status: number; body: unknown } | null = null;
    let written = false;
    const settle = () => {
      if (answer && written) resolve(answer);
    };
    const url = new URL(path, t.url);
    const req = http.request(
      url,
      { method: 'POST', headers: { ...headers, 'content-type': 'application/json', 'content-length': String(BODY_BYTES) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          answer = { status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) };
          settle();
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.on('finish', () => {
      written = true;
      settle();
    });
    let sent = 0;
    const write = () => {
      while (sent < BODY_BYTES) {
        const piece = CHUNK.subarray(0, Math.min(CHUNK.length, BODY_BYTES - sent));
        sent += piece.length;
        if (!req.write(piece)) return void req.once('drain', write);
      }
      req.end();
    };
    write();
  });
}

it('drains more than the body sent here', () => {
  expect(DRAIN_MAX_BYTES).toBeGreaterThan(BODY_BYTES);
});

it('lets a client that sent 12 MiB to POST /user-toolbox read the 413 Error object', async () => {
  const res = await postLarge('/user-toolbox', apiHeaders);
  expect(res.status).toBe(413);
  expect(res.body).toMatchObject({ status: 413, code: 'payload_too_large' });
});

it('lets a client that sent 12 MiB to POST /mcp/{mcpId} read the 413 JSON-RPC error', async () => {
  const res = await postLarge(mcpPath, mcpHeaders);
  expect(res.status).toBe(413);
  expect(res.body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  expect(res.body).not.toHaveProperty('id');
});
