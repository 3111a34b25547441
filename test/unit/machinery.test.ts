import { createCipheriv, randomBytes } from 'node:crypto';
import { operations as generatedOperations } from '../../generated/operations';
import { ConfigError, loadConfig } from '../../src/config';
import { ApiError } from '../../src/http/errors';
import { pageRequest, toPage } from '../../src/http/pagination';
import { PathRouter } from '../../src/http/router';
import { SecretBox, hashSecret, secretBoxOf } from '../../src/lib/crypto';
import { isId, newId } from '../../src/lib/ids';
import { classifyAddress, refuseUrl } from '../../src/outbound/client';

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

  it("tells the description's look-alike file paths apart in the real document: literal segments win", () => {
    const routes = new PathRouter<string>();
    for (const [id, meta] of Object.entries(generatedOperations)) routes.add(meta.method, meta.path, id);
    expect(routes.match('GET', '/file/upload-request/upreq_01jg3b7f0k2q8yq9w6r1c4d5e6')?.route).toBe('getUploadRequest');
    expect(routes.match('GET', '/file/file_01jg3b7f0k2q8yq9w6r1c4d5e6/content')?.route).toBe('downloadFile');
    expect(routes.match('GET', '/file/upload-request/content')?.route).toBe('getUploadRequest');
    expect(routes.match('GET', '/file/file_01jg3b7f0k2q8yq9w6r1c4d5e6/share')?.route).toBe('listFileShares');
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

  it('calls only global unicast IPv6: the forms that embed IPv4, 6to4, NAT64, site-local and documentation blocks are not public', () => {
    for (const address of [
      '::127.0.0.1',
      '::7f00:1',
      '::ffff:0:127.0.0.1',
      '2002:7f00:1::',
      '64:ff9b::7f00:1',
      '64:ff9b:1::1',
      'fec0::1',
      '2001:db8::1',
      '2001::1',
      '3fff::1',
      'fd12::1',
    ]) {
      expect([address, classifyAddress(address)]).toEqual([address, 'private']);
    }
    expect(classifyAddress('::ffff:7f00:1')).toBe('loopback');
    expect(classifyAddress('::ffff:10.0.0.1')).toBe('private');
    expect(classifyAddress('2606:4700:4700::1111')).toBe('public');
    expect(classifyAddress('192.88.99.1')).toBe('private');
    expect(refuseUrl('https://[::127.0.0.1]/', strict)).toMatch(/private/);
    expect(refuseUrl('https://[64:ff9b::a00:1]/hook', strict)).toMatch(/private/);
    expect(refuseUrl('https://[2606:4700:4700::1111]/hook', strict)).toBeNull();
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
  const box = secretBoxOf({ current: randomBytes(32), older: [] });

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
    expect(() => secretBoxOf({ current: randomBytes(32), older: [] }).open(sealed, 'row:1')).toThrow();
  });

  it('names the key a value was sealed with, so an older key still opens it after rotation', () => {
    const [a, b] = [randomBytes(32), randomBytes(32)];
    const sealedWithA = secretBoxOf({ current: a, older: [] }).seal('secret', 'row:1');
    const rotated = secretBoxOf({ current: b, older: [a] });
    expect(SecretBox.keyIdOf(sealedWithA)).not.toBe(rotated.currentKeyId);
    expect(rotated.open(sealedWithA, 'row:1')).toBe('secret');
    const resealed = rotated.seal(rotated.open(sealedWithA, 'row:1'), 'row:1');
    expect(SecretBox.keyIdOf(resealed)).toBe(rotated.currentKeyId);
    expect(secretBoxOf({ current: b, older: [] }).open(resealed, 'row:1')).toBe('secret');
    expect(() => secretBoxOf({ current: b, older: [] }).open(sealedWithA, 'row:1')).toThrow(/which this server does not have/);
  });

  it('opens values sealed before key ids (v1) with whichever configured key sealed them', () => {
    const key = randomBytes(32);
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    cipher.setAAD(Buffer.from('row:1'));
    const data = Buffer.concat([cipher.update('old secret', 'utf8'), cipher.final()]);
    const v1 = ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), data.toString('base64url')].join('.');
    expect(secretBoxOf({ current: randomBytes(32), older: [key] }).open(v1, 'row:1')).toBe('old secret');
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

  it('requires an encryption key with DATABASE_URL or in production, and parses keys strictly', () => {
    expect(() => loadConfig({ DATABASE_URL: 'postgres://db/mcp' })).toThrow(/ENCRYPTION_KEY is required with DATABASE_URL/);
    expect(() => loadConfig({ NODE_ENV: 'production' })).toThrow(/ENCRYPTION_KEY is required when NODE_ENV=production/);
    const key = randomBytes(32);
    for (const written of [key.toString('hex'), key.toString('base64'), key.toString('base64url')]) {
      expect(loadConfig({ ENCRYPTION_KEY: written }).encryptionKeys.current).toEqual(key);
    }
    for (const bad of ['!'.repeat(44), randomBytes(31).toString('base64'), `${key.toString('base64')}x`, 'short']) {
      expect(() => loadConfig({ ENCRYPTION_KEY: bad })).toThrow(ConfigError);
    }
    const older = randomBytes(32);
    expect(loadConfig({ ENCRYPTION_KEYS: `${key.toString('hex')},${older.toString('hex')}` }).encryptionKeys).toEqual({ current: key, older: [older] });
    expect(() => loadConfig({ ENCRYPTION_KEYS: key.toString('hex'), ENCRYPTION_KEY: key.toString('hex') })).toThrow(/not both/);
  });

  it('refuses a BASE_URL with a path: the discovery documents live at the host root', () => {
    for (const BASE_URL of ['https://host.example/api', 'https://host.example/api/', 'https://host.example/?x=1']) {
      expect(() => loadConfig({ ...base, BASE_URL })).toThrow(/BASE_URL must be an origin .* without a path.*\/\.well-known/);
    }
    expect(loadConfig({ ...base, BASE_URL: 'https://mcp.example.com/' }).baseUrl).toBe('https://mcp.example.com');
  });

  it('names the setting that is wrong', () => {
    expect(() => loadConfig({ ...base, PORT: 'eighty' })).toThrow(new ConfigError('PORT must be a whole number from 0 to 65535; got "eighty".'));
    expect(() => loadConfig({ ...base, OUTBOUND_ALLOW_PRIVATE: 'maybe' })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, BASE_URL: 'not a url' })).toThrow(ConfigError);
    expect(() => loadConfig({ ENCRYPTION_KEY: 'short' })).toThrow(ConfigError);
    expect(() => loadConfig({ NODE_ENV: 'production' })).toThrow(/ENCRYPTION_KEY is required/);
    expect(() => loadConfig({ ...base, DATABASE_STATEMENT_TIMEOUT_MS: '-1' })).toThrow(
      new ConfigError('DATABASE_STATEMENT_TIMEOUT_MS must be a whole number from 0 to 3600000; got "-1".'),
    );
  });

  it('cancels statements after 30 s unless told otherwise; 0 turns the timeout off', () => {
    expect(loadConfig(base).databaseStatementTimeoutMs).toBe(30_000);
    expect(loadConfig({ ...base, DATABASE_STATEMENT_TIMEOUT_MS: '0' }).databaseStatementTimeoutMs).toBe(0);
  });

  it('keeps tool-call records 90 days unless told otherwise; 0 keeps them for ever', () => {
    expect(loadConfig(base).toolCallRecordRetentionDays).toBe(90);
    expect(loadConfig({ ...base, TOOL_CALL_RECORD_RETENTION_DAYS: '0' }).toolCallRecordRetentionDays).toBe(0);
    expect(() => loadConfig({ ...base, TOOL_CALL_RECORD_RETENTION_DAYS: '7.5' })).toThrow(
      new ConfigError('TOOL_CALL_RECORD_RETENTION_DAYS must be a whole number from 0 to 36500; got "7.5".'),
    );
  });
});
