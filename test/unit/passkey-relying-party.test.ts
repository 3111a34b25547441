import { ConfigError, loadConfig } from '../../src/config';
import { relyingParty } from '../../src/identity/passkeys';

const KEY = 'a'.repeat(64);
const none = { rpId: null, origins: [] as string[] };

describe('the passkeys’ relying party', () => {
  it('is the web app’s host and origin by default', () => {
    expect(relyingParty(none, 'https://app.example.com')).toEqual({ id: 'app.example.com', origins: ['https://app.example.com'] });
  });

  it('is localhost for a web app on a loopback IP address (browsers refuse IP addresses as rp ids), accepting both origins', () => {
    expect(relyingParty(none, 'http://127.0.0.1:8080')).toEqual({ id: 'localhost', origins: ['http://127.0.0.1:8080', 'http://localhost:8080'] });
  });

  it('is what WEBAUTHN_RP_ID and WEBAUTHN_ORIGINS say when set', () => {
    const config = loadConfig({
      NODE_ENV: 'test',
      ENCRYPTION_KEY: KEY,
      WEBAUTHN_RP_ID: 'Example.com',
      WEBAUTHN_ORIGINS: 'https://app.example.com,https://admin.example.com',
    });
    expect(config.webauthn).toEqual({ rpId: 'example.com', origins: ['https://app.example.com', 'https://admin.example.com'] });
    expect(relyingParty(config.webauthn, 'https://app.example.com')).toEqual({
      id: 'example.com',
      origins: ['https://app.example.com', 'https://admin.example.com'],
    });
  });

  it('refuses an rp id that is a URL or an IP address', () => {
    expect(() => loadConfig({ NODE_ENV: 'test', ENCRYPTION_KEY: KEY, WEBAUTHN_RP_ID: 'https://example.com' })).toThrow(ConfigError);
    expect(() => loadConfig({ NODE_ENV: 'test', ENCRYPTION_KEY: KEY, WEBAUTHN_RP_ID: '10.0.0.1' })).toThrow(ConfigError);
  });
});
