import http, { type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export interface ReceivedEmail {
  from: string;
  to: string[];
  raw: string;
}

/** A real SMTP server on loopback that keeps every message it accepts. */
export async function startSmtpServer(options: { reject?: boolean } = {}) {
  const messages: ReceivedEmail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onRcptTo(address, _session, callback) {
      if (options.reject) return callback(Object.assign(new Error('Mailbox unavailable'), { responseCode: 550 }));
      callback();
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        messages.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
        });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = (server as unknown as { server: http.Server }).server.address() as AddressInfo;
  return {
    url: `smtp://127.0.0.1:${port}`,
    port,
    messages,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** An email's text as written: quoted-printable soft line breaks joined, escaped bytes decoded. */
export function decodedText(mail: ReceivedEmail): string {
  return mail.raw.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/**
 * The link to `path` (`/auth/magic-link/verify`, …) in the `nth` email to `to` that has one
 * (1-based; the latest when omitted), among the messages from index `after` on, once it has
 * arrived: sign-in mail leaves after the answer.
 */
export async function emailedLink(
  smtp: { messages: ReceivedEmail[] },
  to: string,
  path: string,
  which: number | { nth?: number; after?: number } = {},
): Promise<{ link: string; token: string }> {
  const { nth, after = 0 } = typeof which === 'number' ? { nth: which } : which;
  const pattern = new RegExp(`(https?://[^\\s]+${path.replace(/[/.?]/g, (c) => `\\${c}`)}\\?token=[A-Za-z0-9_-]+)`);
  for (let waited = 0; waited < 10_000; waited += 25) {
    const links = smtp.messages
      .slice(after)
      .filter((m) => m.to.includes(to))
      .map((m) => pattern.exec(decodedText(m))?.[1])
      .filter((link): link is string => link !== undefined);
    const link = nth === undefined ? links.at(-1) : links[nth - 1];
    if (link) return { link, token: new URL(link).searchParams.get('token') as string };
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`no email to ${to} with a ${path} link`);
}

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A real HTTP server on loopback standing in for Slack or a webhook receiver. */
export async function startHttpReceiver() {
  /** `alongside`: how many other requests were still being answered when this one arrived. */
  const requests: (ReceivedRequest & { at: number; alongside: number })[] = [];
  let answering = 0;
  type Reply = {
    status: number;
    body: string;
    delayMs?: number;
    /** Sends the headers, then one byte every `everyMs` for `forMs` before ending: alive, but never done in time. */
    drip?: { everyMs: number; forMs: number };
    /** Only for requests whose path contains this; others get 200 ok. */
    onlyFor?: string;
  };
  let reply: Reply = { status: 200, body: 'ok' };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    answering += 1;
    res.once('close', () => (answering -= 1));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const received = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      requests.push({ ...received, at: Date.now(), alongside: answering - 1 });
      const current: Reply = reply.onlyFor && !(req.url ?? '').includes(reply.onlyFor) ? { status: 200, body: 'ok' } : reply;
      if (current.drip) {
        const { everyMs, forMs } = current.drip;
        res.writeHead(current.status, { 'content-type': 'text/plain' });
        const timer = setInterval(() => res.write('.'), everyMs);
        const stop = setTimeout(() => {
          clearInterval(timer);
          res.end();
        }, forMs);
        res.once('close', () => {
          clearInterval(timer);
          clearTimeout(stop);
        });
        return;
      }
      const send = () => res.writeHead(current.status, { 'content-type': 'text/plain' }).end(current.body);
      if (current.delayMs) setTimeout(send, current.delayMs);
      else send();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    respondWith(next: Omit<Reply, 'body'> & { body?: string }) {
      reply = { body: '', ...next };
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * An SMTP server and an HTTP receiver for one test file, started before its tests and
 * closed after them; the receiver answers 200 unless a test says otherwise.
 */
export function usePeers() {
  const peers = {} as { smtp: Awaited<ReturnType<typeof startSmtpServer>>; receiver: Awaited<ReturnType<typeof startHttpReceiver>> };
  beforeAll(async () => {
    peers.smtp = await startSmtpServer();
    peers.receiver = await startHttpReceiver();
  });
  afterAll(async () => {
    await peers.receiver?.close();
    await peers.smtp?.close();
  });
  beforeEach(() => peers.receiver.respondWith({ status: 200, body: 'ok' }));
  return peers;
}
