import { ConfigError, loadConfig } from '../../src/config';

/** SOCIAL_PROVIDERS and SOCIAL_<KEY>_…: the social sign-in providers, checked at start. */
describe('social sign-in settings', () => {
  const load = (env: Record<string, string>) => loadConfig({ NODE_ENV: 'test', ENCRYPTION_KEY: 'a'.repeat(64), ...env });

  it('has none by default', () => {
    expect(load({}).socialProviders).toEqual([]);
  });

  it('knows Google, Microsoft by tenant, and any OpenID Connect issuer, in the order given', () => {
    const providers = load({
      SOCIAL_PROVIDERS: ' google, microsoft ,corp-sso',
      SOCIAL_GOOGLE_CLIENT_ID: 'g-id',
      SOCIAL_GOOGLE_CLIENT_SECRET: 'g-secret',
      SOCIAL_MICROSOFT_CLIENT_ID: 'm-id',
      SOCIAL_MICROSOFT_TENANT: '72f988bf-86f1-41af-91ab-2d7cd011db47',
      SOCIAL_CORP_SSO_CLIENT_ID: 'c-id',
      SOCIAL_CORP_SSO_ISSUER: 'https://id.corp.example/realms/main',
      SOCIAL_CORP_SSO_NAME: 'Corp',
      SOCIAL_CORP_SSO_SCOPES: 'openid email',
    }).socialProviders;
    expect(providers).toEqual([
      {
        key: 'google',
        kind: 'oidc',
        name: 'Google',
        issuer: 'https://accounts.google.com',
        apiUrl: null,
        clientId: 'g-id',
        clientSecret: 'g-secret',
        scope: 'openid email profile',
      },
      {
        key: 'microsoft',
        kind: 'oidc',
        name: 'Microsoft',
        issuer: 'https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0',
        apiUrl: null,
        clientId: 'm-id',
        clientSecret: null,
        scope: 'openid email profile',
      },
      {
        key: 'corp-sso',
        kind: 'oidc',
        name: 'Corp',
        issuer: 'https://id.corp.example/realms/main',
        apiUrl: null,
        clientId: 'c-id',
        clientSecret: null,
        scope: 'openid email',
      },
    ]);
  });

  it('refuses what would not work or not be safe', () => {
    const refused: Record<string, string>[] = [
      { SOCIAL_PROVIDERS: 'Google', SOCIAL_GOOGLE_CLIENT_ID: 'x' },
      { SOCIAL_PROVIDERS: 'google,google', SOCIAL_GOOGLE_CLIENT_ID: 'x' },
      { SOCIAL_PROVIDERS: 'google' },
      { SOCIAL_PROVIDERS: 'corp', SOCIAL_CORP_CLIENT_ID: 'x' },
      { SOCIAL_PROVIDERS: 'corp', SOCIAL_CORP_CLIENT_ID: 'x', SOCIAL_CORP_ISSUER: 'http://id.corp.example' },
      { SOCIAL_PROVIDERS: 'corp', SOCIAL_CORP_CLIENT_ID: 'x', SOCIAL_CORP_ISSUER: 'not a url' },
      { SOCIAL_PROVIDERS: 'corp', SOCIAL_CORP_CLIENT_ID: 'x', SOCIAL_CORP_ISSUER: 'https://id.corp.example?x=1' },
      { SOCIAL_PROVIDERS: 'corp', SOCIAL_CORP_CLIENT_ID: 'x', SOCIAL_CORP_ISSUER: 'https://id.corp.example', SOCIAL_CORP_SCOPES: 'email' },
      { SOCIAL_PROVIDERS: 'microsoft', SOCIAL_MICROSOFT_CLIENT_ID: 'x' },
      { SOCIAL_PROVIDERS: 'microsoft', SOCIAL_MICROSOFT_CLIENT_ID: 'x', SOCIAL_MICROSOFT_TENANT: 'common' },
      { SOCIAL_PROVIDERS: 'github', SOCIAL_GITHUB_CLIENT_ID: 'x' },
      { SOCIAL_PROVIDERS: 'github', SOCIAL_GITHUB_CLIENT_ID: 'x', SOCIAL_GITHUB_CLIENT_SECRET: 'y', SOCIAL_GITHUB_URL: 'http://ghe.corp.example' },
    ];
    for (const env of refused) expect(() => load(env)).toThrow(ConfigError);
  });

  it('knows GitHub, and a GitHub Enterprise Server by its address', () => {
    const base = { SOCIAL_PROVIDERS: 'github', SOCIAL_GITHUB_CLIENT_ID: 'gh-id', SOCIAL_GITHUB_CLIENT_SECRET: 'gh-secret' };
    expect(load(base).socialProviders).toEqual([
      {
        key: 'github',
        kind: 'github',
        name: 'GitHub',
        issuer: 'https://github.com',
        apiUrl: 'https://api.github.com',
        clientId: 'gh-id',
        clientSecret: 'gh-secret',
        scope: 'read:user user:email',
      },
    ]);
    const [ghe] = load({ ...base, SOCIAL_GITHUB_URL: 'https://ghe.corp.example/' }).socialProviders;
    expect(ghe).toMatchObject({ issuer: 'https://ghe.corp.example', apiUrl: 'https://ghe.corp.example/api/v3' });
  });

  it('allows plain http only for an issuer on this machine', () => {
    const [provider] = load({ SOCIAL_PROVIDERS: 'dev', SOCIAL_DEV_CLIENT_ID: 'x', SOCIAL_DEV_ISSUER: 'http://127.0.0.1:9000' }).socialProviders;
    expect(provider?.issuer).toBe('http://127.0.0.1:9000');
  });
});
