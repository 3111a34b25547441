import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { imageInfo } from '../../src/lib/image-info';
import { startTestApp, type TestApp } from '../support/app';
import { jpeg, png, SVG, webpExtended, webpLossless, webpLossy } from '../support/images';
import { expectError } from '../support/client';

/*
 * The organization logo: uploaded as raw image bytes (PNG, JPEG or WebP, recognised by their
 * headers), kept in the storage folder under DATA_DIR, served to members with its type and
 * safe headers, removed. SVG and anything else is refused.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
const storedAt = (orgId: string, bytes: Buffer) => join(t.deps.config.dataDir, 'storage', 'organization', orgId, 'logo', sha256(bytes));

function upload(org: { token: string; orgId: string }, bytes: Buffer, type: string, id = org.orgId) {
  return t.call('PUT', `/organization/${id}/logo`, undefined, { token: org.token, org: org.orgId, raw: bytes, headers: { 'content-type': type } });
}

/** The logo's bytes as a browser would fetch them (no X-Organization-Id). */
async function download(credential: { token?: string; session?: string }, orgId: string) {
  const headers: Record<string, string> = {};
  if (credential.token) headers.authorization = `Bearer ${credential.token}`;
  if (credential.session) headers.cookie = `__Host-cp_session=${credential.session}`;
  const res = await fetch(`${t.url}/organization/${orgId}/logo`, { headers });
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}

describe('image headers', () => {
  it('reads the type and size of PNG, JPEG and WebP (lossy, lossless, extended), and nothing else', () => {
    expect(imageInfo(png(640, 480))).toEqual({ type: 'image/png', width: 640, height: 480 });
    expect(imageInfo(jpeg(300, 200))).toEqual({ type: 'image/jpeg', width: 300, height: 200 });
    expect(imageInfo(webpLossy(64, 32))).toEqual({ type: 'image/webp', width: 64, height: 32 });
    expect(imageInfo(webpLossless(100, 50))).toEqual({ type: 'image/webp', width: 100, height: 50 });
    expect(imageInfo(webpExtended(2048, 1))).toEqual({ type: 'image/webp', width: 2048, height: 1 });
    for (const other of [SVG, Buffer.from('GIF89a\x01\x00\x01\x00'), Buffer.alloc(0), png(10, 10).subarray(0, 20), Buffer.from([0xff, 0xd8, 0xff, 0xd9])]) {
      expect(imageInfo(other)).toBeNull();
    }
  });
});

describe('uploadOrganizationLogo', () => {
  it('stores a PNG, serves it to members with its type and safe headers, and records the upload', async () => {
    const org = await t.factories.org();
    const bytes = png(256, 128);
    const res = await upload(org, bytes, 'image/png');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: org.orgId, logo_url: `/organization/${org.orgId}/logo?v=${sha256(bytes).slice(0, 12)}` });
    const file = storedAt(org.orgId, bytes);
    expect(statSync(file).mode & 0o777).toBe(0o600);

    const session = await t.factories.session(org.ownerId);
    const got = await download({ session }, org.orgId);
    expect(got.status).toBe(200);
    expect(got.bytes.equals(bytes)).toBe(true);
    expect(got.headers.get('content-type')).toBe('image/png');
    expect(got.headers.get('x-content-type-options')).toBe('nosniff');
    expect(got.headers.get('content-security-policy')).toBe("default-src 'none'; sandbox");
    expect(got.headers.get('cache-control')).toBe('private, max-age=86400');
    expect(got.headers.get('etag')).toBe(`"${sha256(bytes)}"`);
    // Through the spec checker as well, at the logo_url the API hands out (its ?v= included).
    expect((await t.as({ session }).get(`/organization/${org.orgId}/logo`)).status).toBe(200);
    const atUrl = await t.call('GET', res.body.logo_url, undefined, { session });
    expect(atUrl.status).toBe(200);
    expect(atUrl.headers.get('content-type')).toBe('image/png');
    expect((await download({ token: org.token }, org.orgId)).status).toBe(200);

    const [entry] = await t.factories.auditEntries(org.orgId, 'organization.logo_updated');
    expect(entry).toMatchObject({
      actor_type: 'api_token',
      target_type: 'organization',
      target_id: org.orgId,
      changes: { content_type: 'image/png', size: bytes.length, sha256: sha256(bytes), width: 256, height: 128 },
    });
  });

  it('replaces the logo (JPEG, then WebP): the URL changes and the old bytes go', async () => {
    const org = await t.factories.org();
    const first = png(10, 10);
    const firstUrl = (await upload(org, first, 'image/png')).body.logo_url;
    const second = jpeg(800, 600);
    const res = await upload(org, second, 'image/jpeg');
    expect(res.status).toBe(200);
    expect(res.body.logo_url).not.toBe(firstUrl);
    expect(existsSync(storedAt(org.orgId, first))).toBe(false);
    expect(existsSync(storedAt(org.orgId, second))).toBe(true);
    const got = await download({ token: org.token }, org.orgId);
    expect([got.headers.get('content-type'), got.bytes.equals(second)]).toEqual(['image/jpeg', true]);
    for (const webp of [webpLossy(100, 100), webpLossless(2048, 2048), webpExtended(1, 1)]) {
      expect((await upload(org, webp, 'image/webp')).status).toBe(200);
      const served = await download({ token: org.token }, org.orgId);
      expect([served.headers.get('content-type'), served.bytes.equals(webp)]).toEqual(['image/webp', true]);
    }
  });

  it('refuses SVG and other types (415), bytes that are not the declared image, oversized images (400) and bodies over 1 MiB (413)', async () => {
    const org = await t.factories.org();
    expectError(await upload(org, SVG, 'image/svg+xml'), 415, 'unsupported_media_type');
    expectError(await upload(org, Buffer.from('GIF89a'), 'image/gif'), 415, 'unsupported_media_type');
    expectError(await upload(org, png(10, 10), 'application/octet-stream'), 415, 'unsupported_media_type');
    for (const [bytes, type] of [
      [SVG, 'image/png'],
      [png(10, 10), 'image/jpeg'],
      [jpeg(10, 10), 'image/webp'],
      [png(2049, 10), 'image/png'],
      [jpeg(10, 4096), 'image/jpeg'],
      [png(0, 10), 'image/png'],
    ] as const) {
      const res = await upload(org, bytes, type);
      expectError(res, 400, 'validation_failed');
      expect(res.body.errors).toEqual([{ in: 'body', pointer: '', message: expect.any(String) }]);
    }
    expectError(await upload(org, png(10, 10, 1_048_576), 'image/png'), 413, 'payload_too_large');
    expectError(
      await t.call('PUT', `/organization/${org.orgId}/logo`, undefined, { token: org.token, org: org.orgId, headers: { 'content-type': 'image/png' } }),
      400,
      'validation_failed',
    );
    expect((await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).body.logo_url).toBeNull();
    expect(await t.factories.auditEntries(org.orgId, 'organization.logo_updated')).toEqual([]);
  });

  it('answers 404 for another organization’s id, which keeps its logo', async () => {
    const org = await t.factories.org();
    const other = await t.factories.org();
    const theirs = png(5, 5);
    await upload(other, theirs, 'image/png');
    expectError(await upload(org, png(6, 6), 'image/png', other.orgId), 404, 'not_found');
    expect((await download({ token: other.token }, other.orgId)).bytes.equals(theirs)).toBe(true);
  });
});

describe('getOrganizationLogo', () => {
  it('is 404 to anyone but the organization’s members, and when there is no logo', async () => {
    const org = await t.factories.org();
    const outsider = await t.factories.org();
    expect((await download({ token: org.token }, org.orgId)).status).toBe(404);
    await upload(org, png(3, 3), 'image/png');
    expect((await download({ token: outsider.token }, org.orgId)).status).toBe(404);
    expect((await download({ session: await t.factories.session(outsider.ownerId) }, org.orgId)).status).toBe(404);
    const suspended = await t.factories.member(org.orgId, { status: 'suspended' });
    expect((await download({ session: await t.factories.session(suspended) }, org.orgId)).status).toBe(404);
    const member = await t.factories.member(org.orgId, { roles: ['member'] });
    expect((await download({ session: await t.factories.session(member) }, org.orgId)).status).toBe(200);
    expect((await download({}, org.orgId)).status).toBe(401);
  });

  it('answers 304 to a browser holding the current logo, 200 once it was replaced, and 404 to an outsider who names its ETag', async () => {
    const org = await t.factories.org();
    const outsider = await t.factories.org();
    const first = png(20, 20);
    await upload(org, first, 'image/png');
    const session = await t.factories.session(org.ownerId);
    const etag = `"${sha256(first)}"`;
    const held = await t.as({ session }).get(`/organization/${org.orgId}/logo`, { headers: { 'If-None-Match': etag } });
    expect(held.status).toBe(304);
    expect(held.headers.get('etag')).toBe(etag);
    expect(held.headers.get('cache-control')).toBe('private, max-age=86400');
    expect(held.text).toBe('');
    // Images are not compressed again: one ETag whatever the client accepts.
    const plain = await download({ token: org.token }, org.orgId);
    expect([plain.headers.get('etag'), plain.headers.get('content-encoding')]).toEqual([etag, null]);
    const outside = await t.call('GET', `/organization/${org.orgId}/logo`, undefined, { token: outsider.token, headers: { 'if-none-match': etag } });
    expect(outside.status).toBe(404);
    await upload(org, jpeg(30, 30), 'image/jpeg');
    const replaced = await t.call('GET', `/organization/${org.orgId}/logo`, undefined, { session, headers: { 'if-none-match': etag } });
    expect(replaced.status).toBe(200);
    expect(replaced.headers.get('content-type')).toBe('image/jpeg');
  });
});

describe('deleteOrganizationLogo', () => {
  it('removes the logo and its bytes, and records it; a second removal is 404', async () => {
    const org = await t.factories.org();
    const bytes = png(40, 40);
    await upload(org, bytes, 'image/png');
    const client = t.as({ token: org.token, org: org.orgId });
    expect((await client.delete(`/organization/${org.orgId}/logo`)).status).toBe(204);
    expect((await client.get(`/organization/${org.orgId}`)).body.logo_url).toBeNull();
    expect(existsSync(storedAt(org.orgId, bytes))).toBe(false);
    expect((await download({ token: org.token }, org.orgId)).status).toBe(404);
    const [entry] = await t.factories.auditEntries(org.orgId, 'organization.logo_removed');
    expect(entry).toMatchObject({ target_id: org.orgId, changes: { sha256: sha256(bytes) } });
    expectError(await client.delete(`/organization/${org.orgId}/logo`), 404, 'not_found');
  });

  it('goes with its organization', async () => {
    const org = await t.factories.org();
    const bytes = png(8, 8);
    await upload(org, bytes, 'image/png');
    const slug = (await t.as({ token: org.token, org: org.orgId }).get(`/organization/${org.orgId}`)).body.slug;
    const session = await t.factories.session(org.ownerId);
    expect((await t.as({ session, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${slug}`)).status).toBe(204);
    expect(existsSync(storedAt(org.orgId, bytes))).toBe(false);
  });
});
