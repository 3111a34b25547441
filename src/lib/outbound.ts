import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP } from 'node:net';

/**
 * Outbound calls the server makes on a customer's behalf (webhooks, upstream MCP servers,
 * log backends) must not reach the server's own network. Every address a host name resolves
 * to is checked when the connection is made, so DNS rebinding cannot slip past a check done
 * earlier.
 */
export interface OutboundPolicy {
  allowLoopback: boolean;
  allowPrivate: boolean;
}

// The unspecified addresses reach the host itself on Linux, so they count as loopback.
const loopback = new BlockList();
loopback.addSubnet('127.0.0.0', 8, 'ipv4');
loopback.addSubnet('0.0.0.0', 8, 'ipv4');
loopback.addAddress('::1', 'ipv6');
loopback.addAddress('::', 'ipv6');

// IPv4 special-use ranges (RFC 6890 and successors): none of them is the public internet.
const specialIpv4 = new BlockList();
for (const [net, bits] of [
  ['10.0.0.0', 8], ['100.64.0.0', 10], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.88.99.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24],
  ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) {
  specialIpv4.addSubnet(net, bits, 'ipv4');
}

// IPv6: only global unicast (2000::/3) is public, minus its special-use blocks. Everything
// else, the forms that embed an IPv4 address (::a.b.c.d, ::ffff:0:a.b.c.d, 64:ff9b::/96,
// 64:ff9b:1::/48) and site-local fec0::/10 included, is not.
const globalUnicast = new BlockList();
globalUnicast.addSubnet('2000::', 3, 'ipv6');
const specialIpv6 = new BlockList();
for (const [net, bits] of [['2001::', 23], ['2001:db8::', 32], ['2002::', 16], ['3fff::', 20]] as const) {
  specialIpv6.addSubnet(net, bits, 'ipv6');
}

type AddressClass = 'loopback' | 'private' | 'public';

export function classifyAddress(address: string): AddressClass {
  const family = isIP(address);
  if (family === 0) throw new Error(`Not an IP address: ${address}`);
  // IPv4-mapped (::ffff:a.b.c.d, or as Node writes it, ::ffff:7f00:1) is the IPv4 address itself.
  const mapped = family === 6 ? mappedIpv4(address) : null;
  if (mapped) return classifyAddress(mapped);
  if (family === 4) {
    if (loopback.check(address, 'ipv4')) return 'loopback';
    return specialIpv4.check(address, 'ipv4') ? 'private' : 'public';
  }
  if (loopback.check(address, 'ipv6')) return 'loopback';
  return globalUnicast.check(address, 'ipv6') && !specialIpv6.check(address, 'ipv6') ? 'public' : 'private';
}

function mappedIpv4(address: string): string | null {
  const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (dotted) return dotted;
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (!hex) return null;
  const high = parseInt(hex[1] as string, 16);
  const low = parseInt(hex[2] as string, 16);
  return [high >> 8, high & 255, low >> 8, low & 255].join('.');
}

function allowed(kind: AddressClass, policy: OutboundPolicy): boolean {
  if (kind === 'loopback') return policy.allowLoopback;
  if (kind === 'private') return policy.allowPrivate;
  return true;
}

/**
 * An outbound call the server refused or gave up on. `message` is for the customer and never
 * says more than they need (which internal names exist, what a remote said in its status
 * line); `detail` is for the operator's log.
 */
export class OutboundRefused extends Error {
  override readonly name = 'OutboundRefused';
  constructor(message: string, readonly detail: string = message) {
    super(message);
  }
}

function hostOf(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '');
}

/**
 * Checks what can be checked without DNS: scheme, credentials in the URL, and literal
 * addresses. Plain http is accepted only for hosts the policy lets the server reach on its
 * own network (a local test receiver); anything public must be https.
 * Returns the reason for refusing, or null.
 */
export function refuseUrl(raw: string, policy: OutboundPolicy): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'is not a valid URL';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must use https';
  if (url.username || url.password) return 'must not carry a user name or password';
  const host = hostOf(url);
  const literal = isIP(host) !== 0 ? classifyAddress(host) : host === 'localhost' || host.endsWith('.localhost') ? 'loopback' : null;
  if (literal !== null && !allowed(literal, policy)) return `points to a ${literal} address, which the server does not call`;
  if (url.protocol === 'http:' && (literal === null || literal === 'public')) return 'must use https';
  return null;
}

function guardedLookup(policy: OutboundPolicy, plainHttp: boolean) {
  return (hostname: string, options: object, callback: (...args: any[]) => void): void => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err);
      for (const { address } of addresses) {
        const kind = classifyAddress(address);
        if (!allowed(kind, policy)) {
          return callback(new OutboundRefused(UNREACHABLE, `${hostname} resolves to ${address}, a ${kind} address`));
        }
        if (plainHttp && kind === 'public') return callback(new OutboundRefused('Plain http to a public address is refused; use https.'));
      }
      const all = (options as { all?: boolean }).all;
      if (all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(new OutboundRefused(UNREACHABLE, `${hostname} has no address`));
      return callback(null, first.address, first.family);
    });
  };
}

/** What a customer is told when the destination cannot be reached, whatever the reason. */
const UNREACHABLE = 'The destination could not be reached from this server.';

export interface OutboundResponse {
  status: number;
  /** The first bytes of the answer (at most RESPONSE_CAP), for the log; never shown to customers. */
  body: string;
}

/** How much of an answer is read: enough to log, never a whole body a remote chose. */
const RESPONSE_CAP = 4096;

/**
 * POSTs a JSON body under an overall deadline (connecting, sending, the answer's headers and
 * its first RESPONSE_CAP bytes must all fit in `timeoutMs`, however slowly the remote
 * drips), following no redirects (a redirect could lead to a private address). Resolves
 * with the status once the headers and at most RESPONSE_CAP bytes are in.
 */
export function postJson(raw: string, payload: unknown, policy: OutboundPolicy, timeoutMs = 10_000): Promise<OutboundResponse> {
  const refusal = refuseUrl(raw, policy);
  if (refusal) return Promise.reject(new OutboundRefused(`The URL ${refusal}.`));
  const url = new URL(raw);
  const body = Buffer.from(JSON.stringify(payload));
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      outcome();
    };
    const req = client.request(
      url,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': body.length, 'user-agent': 'mcp-control-plane/0.1' },
        lookup: guardedLookup(policy, url.protocol === 'http:') as any,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        const done = () => {
          finish(() => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8').slice(0, RESPONSE_CAP) }));
          res.destroy();
        };
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          size += chunk.length;
          if (size >= RESPONSE_CAP) done();
        });
        res.on('end', done);
        res.on('error', (err) => finish(() => reject(err)));
      },
    );
    const deadline = setTimeout(() => {
      const timedOut = new OutboundRefused(`No answer within ${timeoutMs / 1000} seconds.`, `no complete answer from ${url.host} within ${timeoutMs} ms`);
      finish(() => reject(timedOut));
      req.destroy(timedOut);
    }, timeoutMs);
    req.on('error', (err) => finish(() => reject(err)));
    req.end(body);
  });
}
