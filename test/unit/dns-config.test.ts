import { ConfigError, loadConfig } from '../../src/config';

/** DNS_SERVERS and DNS_TIMEOUT_MS, the resolver org-domain verification asks. */
describe('DNS settings', () => {
  const load = (env: Record<string, string>) => loadConfig({ NODE_ENV: 'test', ENCRYPTION_KEY: 'a'.repeat(64), ...env });

  it('defaults to the system resolvers and a 5-second bound', () => {
    expect(load({}).dns).toEqual({ servers: [], timeoutMs: 5000 });
  });

  it('takes IPv4 and IPv6 addresses with optional ports, in the form dns.Resolver#setServers takes', () => {
    expect(load({ DNS_SERVERS: ' 10.0.0.2, 127.0.0.1:5353,[::1]:53, ::1 ', DNS_TIMEOUT_MS: '800' }).dns).toEqual({
      servers: ['10.0.0.2', '127.0.0.1:5353', '[::1]:53', '::1'],
      timeoutMs: 800,
    });
  });

  it('refuses host names, bad ports and out-of-range timeouts', () => {
    for (const DNS_SERVERS of ['dns.example', '10.0.0.2:0', '10.0.0.2:70000', '999.1.1.1', 'udp://10.0.0.2']) {
      expect(() => load({ DNS_SERVERS })).toThrow(ConfigError);
    }
    expect(() => load({ DNS_TIMEOUT_MS: '10' })).toThrow(ConfigError);
  });
});
