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

const privateRanges = new BlockList();
for (const [net, bits] of [
  ['10.0.0.0', 8], ['100.64.0.0', 10], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24],
  ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) {
  privateRanges.addSubnet(net, bits, 'ipv4');
}
for (const [net, bits] of [['fc00::', 7], ['fe80::', 10], ['ff00::', 8], ['64:ff9b::', 96], ['2001:db8::', 32]] as const) {
  privateRanges.addSubnet(net, bits, 'ipv6');
}

type AddressClass = 'loopback' | 'private' | 'public';

export function classifyAddress(address: string): AddressClass {
  const family = isIP(address);
  if (family === 0) throw new Error(`Not an IP address: ${address}`);
  const mapped = family === 6 ? /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1] : undefined;
  if (mapped) return classifyAddress(mapped);
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (loopback.check(address, type)) return 'loopback';
  if (privateRanges.check(address, type)) return 'private';
  return 'public';
}

function allowed(kind: AddressClass, policy: OutboundPolicy): boolean {
  if (kind === 'loopback') return policy.allowLoopback;
  if (kind === 'private') return policy.allowPrivate;
  return true;
}

export class OutboundRefused extends Error {
  override readonly name = 'OutboundRefused';
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
          return callback(new OutboundRefused(`${hostname} resolves to a ${kind} address, which the server does not call`));
        }
        if (plainHttp && kind === 'public') return callback(new OutboundRefused('plain http to a public address is refused; use https'));
      }
      const all = (options as { all?: boolean }).all;
      if (all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(new OutboundRefused(`${hostname} has no address`));
      return callback(null, first.address, first.family);
    });
  };
}

export interface OutboundResponse {
  status: number;
  statusText: string;
  body: string;
}

/**
 * POSTs a JSON body with a timeout, following no redirects (a redirect could lead to a
 * private address). Returns the status and up to 4 KiB of the answer.
 */
export function postJson(raw: string, payload: unknown, policy: OutboundPolicy, timeoutMs = 10_000): Promise<OutboundResponse> {
  const refusal = refuseUrl(raw, policy);
  if (refusal) return Promise.reject(new OutboundRefused(`The URL ${refusal}.`));
  const url = new URL(raw);
  const body = Buffer.from(JSON.stringify(payload));
  const client = url.protocol === 'https:' ? https : http;
  const host = hostOf(url);
  return new Promise((resolve, reject) => {
    if (isIP(host) !== 0) {
      const kind = classifyAddress(host);
      if (!allowed(kind, policy)) return reject(new OutboundRefused(`The URL points to a ${kind} address.`));
    }
    const req = client.request(
      url,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': body.length, 'user-agent': 'mcp-control-plane/0.1' },
        lookup: guardedLookup(policy, url.protocol === 'http:') as any,
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          if (size < 4096) chunks.push(chunk);
          size += chunk.length;
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, statusText: res.statusMessage ?? '', body: Buffer.concat(chunks).toString('utf8').slice(0, 4096) }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new OutboundRefused(`No answer within ${timeoutMs / 1000} seconds.`)));
    req.on('error', reject);
    req.end(body);
  });
}
