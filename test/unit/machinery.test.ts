import { randomBytes } from 'node:crypto';
import { ConfigError, loadConfig } from '../../src/config';
import { ApiError } from '../../src/http/errors';
import { pageRequest, toPage } from '../../src/http/pagination';
import { PathRouter } from '../../src/http/router';
import { SecretBox, hashSecret } from '../../src/lib/crypto';
import { isId, newId } from '../../src/lib/ids';
import { classifyAddress, refuseUrl } from '../../src/lib/outbound';

describe('ids', () => {
  it('are a prefix and 26 lowercase Crockford characters, sorting in creation order', () => {
    const ids = Array.from({ length: 1000 }, () => newId('notificationDestination'));
    for (const id of ids) expect(id).toMatch(/^onfd_[0-7][0-9a-hjkmnp-tv-z]{25}$/);
    expect([...ids].sort()).toEqual(ids);
    expect(isId('notificationDestination', ids[0] as string)).toBe(true);
    expect(isId('organization', ids[0] as string)).toBe(false);
    expect(isId('organization', 'org_01JG3B7F0K2Q8YQ9W6R1C4D5E6')).toBe(false);
  });
});

describe('PathRouter', () => {
  const router = new PathRouter<string>();
  router.add('get', '/team/{id}', 'getTeam');
  router.add('patch', '/team/{id}', 'updateTeam');
  router.add('get', '/team/mine', 'listMyTeams');
  router.add('delete', '/team/{id}/members/{userId}', 'removeTeamMember');

  it('prefers literal segments over parameters', () => {
    expect(router.match('GET', '/team/mine')?.route).toBe('listMyTeams');
    expect(router.match('GET', '/team/team_1')?.route).toBe('getTeam');
  });

  it('reports the methods a path has when the method does not match', () => {
    expect(router.match('DELETE', '/team/team_1')).toEqual({ route: undefined, allowed: ['GET', 'HEAD', 'PATCH'] });
  });

  it('falls back to a parameter when a literal branch leads nowhere', () => {
    expect(router.match('DELETE', '/team/mine/members/usr_1')?.route).toBe('removeTeamMember');
  });

  it('matches nothing for unknown or empty segments', () => {
    expect(router.match('GET', '/teams')).toBeNull();
    expect(router.match('GET', '/team//members/x')).toBeNull();
  });
});

describe('outbound address policy', () => {
  const strict = { allowLoopback: false, allowPrivate: false };

  it('classifies loopback, private and public addresses, including IPv4-mapped IPv6', () => {
    expect(classifyAddress('127.0.0.1')).toBe('loopback');
    expect(classifyAddress('::1')).toBe('loopback');
    expect(classifyAddress('0.0.0.0')).toBe('loopback');
    expect(classifyAddress('::')).toBe('loopback');
    expect(classifyAddress('10.1.2.3')).toBe('private');
    expect(classifyAddress('169.254.169.254')).toBe('private');
    expect(classifyAddress('fd00::1')).toBe('private');
    expect(classifyAddress('::ffff:192.168.1.1')).toBe('private');
    expect(classifyAddress('93.184.216.34')).toBe('public');
  });

  it('refuses URLs that are not https, carry credentials or name internal hosts', () => {
    expect(refuseUrl('https://hooks.slack.com/services/T/B/X', strict)).toBeNull();
    expect(refuseUrl('http://hooks.slack.com/services/T/B/X', strict)).toBe('must use https');
    expect(refuseUrl('ftp://example.com', strict)).toBe('must use https');
    expect(refuseUrl('https://user:pw@example.com', strict)).toMatch(/user name or password/);
    expect(refuseUrl('https://127.0.0.1/x', strict)).toMatch(/loopback/);
    expect(refuseUrl('https://localhost/x', strict)).toMatch(/loopback/);
    expect(refuseUrl('https://[::1]/x', strict)).toMatch(/loopback/);
    expect(refuseUrl('https://10.0.0.8/x', strict)).toMatch(/private/);
    expect(refuseUrl('not a url', strict)).toBe('is not a valid URL');
  });

  it('lets a loopback receiver through, over http too, only when allowed', () => {
    expect(refuseUrl('http://127.0.0.1:9999/hook', { allowLoopback: true, allowPrivate: false })).toBeNull();
    expect(refuseUrl('http://10.0.0.8/hook', { allowLoopback: true, allowPrivate: false })).toMatch(/private/);
  });
});

describe('SecretBox', () => {
  const box = new SecretBox(randomBytes(32));

  it('round-trips and never stores the plaintext', () => {
    const sealed = box.seal('https://hooks.slack.com/services/T/B/secret', 'row:1');
    expect(sealed).not.toContain('secret');
    expect(box.open(sealed, 'row:1')).toBe('https://hooks.slack.com/services/T/B/secret');
  });

  it('refuses a ciphertext moved to another row, tampered with, or under another key', () => {
    const sealed = box.seal('value', 'row:1');
    expect(() => box.open(sealed, 'row:2')).toThrow();
    const parts = sealed.split('.');
    parts[3] = Buffer.from('other').toString('base64url');
    expect(() => box.open(parts.join('.'), 'row:1')).toThrow();
    expect(() => new SecretBox(randomBytes(32)).open(sealed, 'row:1')).toThrow();
  });

  it('hashes credentials with SHA-256', () => {
    expect(hashSecret('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });
});

describe('pagination cursors', () => {
  it('round-trip the last id and refuse cursors of another list', () => {
    const rows = Array.from({ length: 3 }, () => ({ id: newId('notificationDestination') }));
    const page = toPage(rows, { limit: 2, after: undefined }, (r) => r.id);
    expect(page.data).toEqual([rows[0]?.id, rows[1]?.id]);
    expect(pageRequest({ cursor: page.next_cursor as string }, 'notificationDestination')).toEqual({ limit: 50, after: rows[1]?.id });
    expect(() => pageRequest({ cursor: page.next_cursor as string }, 'team')).toThrow(ApiError);
    expect(() => pageRequest({ cursor: 'bm9wZQ' }, 'notificationDestination')).toThrow(ApiError);
    expect(toPage(rows, { limit: 3, after: undefined }, (r) => r.id).next_cursor).toBeNull();
  });
});

describe('configuration', () => {
  const base = { ENCRYPTION_KEY: randomBytes(32).toString('hex') };

  it('has defaults for a local start', () => {
    const config = loadConfig({ ...base });
    expect(config).toMatchObject({ port: 8080, baseUrl: 'http://127.0.0.1:8080', databaseUrl: null, env: 'development' });
    expect(config.outbound).toMatchObject({ allowLoopback: false, allowPrivate: false });
  });

  it('names the setting that is wrong', () => {
    expect(() => loadConfig({ ...base, PORT: 'eighty' })).toThrow(new ConfigError('PORT must be a whole number from 0 to 65535; got "eighty".'));
    expect(() => loadConfig({ ...base, OUTBOUND_ALLOW_PRIVATE: 'maybe' })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, BASE_URL: 'not a url' })).toThrow(ConfigError);
    expect(() => loadConfig({ ENCRYPTION_KEY: 'short' })).toThrow(ConfigError);
    expect(() => loadConfig({ NODE_ENV: 'production' })).toThrow(/ENCRYPTION_KEY is required/);
  });
});
