import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import S3rver from 's3rver';
import { sweep } from '../../src/areas/files/files.bytes';
import { storageOf } from '../../src/lib/storage';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import type { SeededOrg } from '../support/factories';
import { decodedText, startSmtpServer } from '../support/peers';

/*
 * The Files operations over HTTP against the real app, once with the bytes on the local
 * disk and once in an S3-compatible bucket (s3rver on loopback): uploads and downloads
 * byte for byte with their SHA-256, the per-file limit and the plan's storage quota, the
 * download's headers, shares, upload requests from reservation to confirmation, cancel and
 * decline, and the sweeper. A real SMTP server receives the emails.
 */

const KiB = 1024;
/** The per-file limit the apps run with: small, so that 413s are cheap to provoke. */
const LIMIT = 256 * KiB;
const unique = () => randomBytes(4).toString('hex');
const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');

const PDF = Buffer.concat([Buffer.from('%PDF-1.7\n'), randomBytes(3000)]);
const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), randomBytes(600)]);

type Caller = { token: string; org: string };

/** A multipart/form-data body as browsers and fetch build it. */
async function multipart(parts: { name: string; filename?: string; type?: string; data: string | Buffer }[]): Promise<{ body: Buffer; type: string }> {
  const form = new FormData();
  for (const p of parts) {
    if (p.filename !== undefined) form.append(p.name, new Blob([p.data], { type: p.type ?? '' }), p.filename);
    else form.append(p.name, String(p.data));
  }
  const request = new Request('http://localhost/', { method: 'POST', body: form });
  return { body: Buffer.from(await request.arrayBuffer()), type: request.headers.get('content-type') as string };
}

describe.each(['disk', 's3'] as const)('Files with %s storage', (backend) => {
  let t: TestApp;
  let s3: S3rver | null = null;
  let s3Dir: string | null = null;
  let smtp: Awaited<ReturnType<typeof startSmtpServer>>;
  let org: SeededOrg;
  let owner: Caller;
  let aliceId: string;
  let alice: Caller;
  let bobId: string;
  let bob: Caller;
  let teamId: string;

  beforeAll(async () => {
    smtp = await startSmtpServer();
    const env: Record<string, string> = { SMTP_URL: smtp.url, FILE_MAX_BYTES: String(LIMIT), FILE_SWEEP_INTERVAL_MS: '0' };
    if (backend === 's3') {
      s3Dir = mkdtempSync(join(tmpdir(), 's3rver-'));
      s3 = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: s3Dir, configureBuckets: [{ name: 'tool-files', configs: [] }] });
      const { port } = await s3.run();
      Object.assign(env, {
        STORAGE_BACKEND: 's3',
        S3_BUCKET: 'tool-files',
        S3_ENDPOINT: `http://127.0.0.1:${port}`,
        S3_ACCESS_KEY_ID: 'S3RVER',
        S3_SECRET_ACCESS_KEY: 'S3RVER',
        S3_PREFIX: `run-${unique()}`,
      });
    }
    t = await startTestApp({ env });
    org = await t.factories.org();
    owner = { token: org.token, org: org.orgId };
    aliceId = await t.factories.member(org.orgId, { userId: await t.factories.user({ email: `alice-${unique()}@example.com`, name: 'Alice' }) });
    alice = { token: await t.factories.token(org.orgId, aliceId), org: org.orgId };
    bobId = await t.factories.member(org.orgId);
    bob = { token: await t.factories.token(org.orgId, bobId), org: org.orgId };
    teamId = await t.factories.team(org.orgId, `Finance ${unique()}`, [bobId]);
  });

  afterAll(async () => {
    await t?.close();
    await smtp?.close();
    await s3?.close();
    if (s3Dir) rmSync(s3Dir, { recursive: true, force: true });
  });

  const storage = () => storageOf(t.deps.config);
  const keyOf = async (fileId: string) =>
    (await t.db.selectFrom('tool_files').select('storage_key').where('id', '=', fileId).executeTakeFirst())?.storage_key ?? null;

  async function upload(who: Caller, parts: Parameters<typeof multipart>[0]) {
    const { body, type } = await multipart(parts);
    return t.as(who).post('/file', undefined, { raw: body, headers: { 'content-type': type } });
  }

  async function uploaded(who: Caller, data: Buffer | string, filename = 'notes.txt', type = 'text/plain') {
    const res = await upload(who, [{ name: 'file', filename, type, data }]);
    expect(res.status).toBe(201);
    return res.body as { id: string; sha256: string; size_bytes: number; name: string };
  }

  /** The bytes as a client receives them (the spec-checked call reads them as text). */
  async function downloadBytes(who: Caller, id: string) {
    const res = await fetch(`${t.url}/file/${id}/content`, { headers: { authorization: `Bearer ${who.token}`, 'x-organization-id': who.org } });
    return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
  }

  describe('tool files', () => {
    it('stores an upload with its SHA-256, lists it, and serves it back byte for byte as a sandboxed attachment', async () => {
      const data = randomBytes(200 * KiB);
      const res = await upload(alice, [{ name: 'file', filename: 'Q3 report – final.bin', type: 'application/octet-stream', data }]);
      expect(res.status).toBe(201);
      const file = res.body;
      expect(res.headers.get('location')).toBe(`/file/${file.id}`);
      expect(file).toMatchObject({
        name: 'Q3 report – final.bin',
        content_type: 'application/octet-stream',
        size_bytes: data.length,
        sha256: sha256(data),
        owner_user_id: aliceId,
        source: 'uploaded',
        upload_request_id: null,
        caller_access: 'owner',
      });
      expect(await storage().has((await keyOf(file.id)) as string)).toBe(true);
      expect((await t.as(alice).op('getFile', { params: { id: file.id } })).body).toEqual(file);
      const listed = await t.as(alice).op('listFiles', { query: { owner_user_id: aliceId } });
      expect(listed.body.data.map((f: { id: string }) => f.id)).toContain(file.id);

      const checked = await t.as(alice).get(`/file/${file.id}/content`);
      expect(checked.status).toBe(200);
      const got = await downloadBytes(alice, file.id);
      expect(got.status).toBe(200);
      expect(sha256(got.bytes)).toBe(sha256(data));
      expect(
        Object.fromEntries(
          [
            'content-type',
            'content-length',
            'etag',
            'accept-ranges',
            'x-content-type-options',
            'cache-control',
            'content-security-policy',
            'content-disposition',
          ].map((h) => [h, got.headers.get(h)]),
        ),
      ).toEqual({
        'content-type': 'application/octet-stream',
        'content-length': String(data.length),
        etag: `"${sha256(data)}"`,
        'accept-ranges': 'none',
        'x-content-type-options': 'nosniff',
        'cache-control': 'private, no-cache',
        'content-security-policy': "sandbox; default-src 'none'",
        'content-disposition': `attachment; filename="Q3 report _ final.bin"; filename*=UTF-8''Q3%20report%20%E2%80%93%20final.bin`,
      });
      const [entry] = await t.factories.auditEntries(org.orgId, 'file.created');
      expect(entry).toBeDefined();
      expect(await t.factories.auditEntries(org.orgId, 'file.created')).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ target_id: file.id, changes: expect.objectContaining({ sha256: sha256(data), size_bytes: data.length }) }),
        ]),
      );
    });

    it('takes the name from a `name` part, and an HTML file downloads inert (attachment, nosniff, sandbox)', async () => {
      const file = (
        await upload(alice, [
          { name: 'file', filename: 'x.html', type: 'text/html', data: '<html><script>alert(1)</script></html>' },
          { name: 'name', data: 'page.html' },
        ])
      ).body;
      expect([file.name, file.content_type]).toEqual(['page.html', 'text/html']);
      const got = await t.as(alice).get(`/file/${file.id}/content`);
      expect(got.headers.get('content-disposition')).toMatch(/^attachment;/);
      expect(got.headers.get('content-security-policy')).toBe("sandbox; default-src 'none'");
      expect(got.headers.get('x-content-type-options')).toBe('nosniff');
    });

    it('refuses a file over the per-file limit with 413 as it arrives, and keeps nothing', async () => {
      const before = await t.db.selectFrom('tool_files').select('id').where('org_id', '=', org.orgId).execute();
      const sweeps = await t.db.selectFrom('storage_sweeps').select('key').execute();
      expectError(await upload(alice, [{ name: 'file', filename: 'big.bin', data: randomBytes(LIMIT + 1) }]), 413, 'payload_too_large');
      expectError(await upload(alice, [{ name: 'file', filename: 'huge.bin', data: randomBytes(4 * LIMIT) }]), 413, 'payload_too_large');
      // Exactly the limit fits.
      const fits = await uploaded(alice, randomBytes(LIMIT), 'limit.bin');
      expect(fits.size_bytes).toBe(LIMIT);
      const after = await t.db.selectFrom('tool_files').select('id').where('org_id', '=', org.orgId).execute();
      expect(after.length).toBe(before.length + 1);
      expect(await t.db.selectFrom('storage_sweeps').select('key').execute()).toEqual(sweeps);
    });

    it('answers 400 without a file part or with a bad name, 415 for a body that is not multipart', async () => {
      expectError(await upload(alice, [{ name: 'name', data: 'x.txt' }]), 400, 'validation_failed');
      expectError(
        await upload(alice, [
          { name: 'file', filename: 'a.txt', data: 'a' },
          { name: 'name', data: '..' },
        ]),
        400,
        'validation_failed',
      );
      expectError(
        await upload(alice, [
          { name: 'file', filename: 'a.txt', data: 'a' },
          { name: 'name', data: 'a/b' },
        ]),
        400,
        'validation_failed',
      );
      expectError(await t.as(alice).post('/file', { file: 'x' }), 415, 'unsupported_media_type');
      expect(await t.factories.auditEntries(org.orgId, 'file.created')).not.toContainEqual(
        expect.objectContaining({ changes: expect.objectContaining({ name: 'a.txt' }) }),
      );
    });

    it('refuses what would pass the plan’s file_storage_bytes with 403, and counts what is stored in the entitlements', async () => {
      const other = await t.factories.org();
      const who = { token: other.token, org: other.orgId };
      const first = await uploaded(who, 'hello');
      const ent = await t.as(who).op('getEntitlements');
      expect(ent.body.limits.file_storage_bytes).toEqual({ limit: 10 * 1024 ** 3, used: 5 });
      // Fill the quota to 10 bytes short with a row standing for files stored earlier.
      await t.db
        .insertInto('tool_files')
        .values({
          id: `file_${'0'.repeat(25)}1`,
          org_id: other.orgId,
          owner_user_id: other.ownerId,
          name: 'old.bin',
          content_type: 'application/octet-stream',
          size_bytes: 10 * 1024 ** 3 - 15,
          sha256: sha256('old'),
          storage_key: `file/${other.orgId}/old/${unique()}`,
          source: 'uploaded',
          upload_request_id: null,
          state: 'stored',
          uploaded_at: new Date(),
        })
        .execute();
      expectError(await upload(who, [{ name: 'file', filename: 'eleven.txt', data: '01234567890' }]), 403, 'entitlement_exceeded');
      expect((await uploaded(who, '0123456789')).size_bytes).toBe(10);
      await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', other.orgId).execute();
      expect((await upload(who, [{ name: 'file', filename: 'more.txt', data: 'more' }])).status).toBe(201);
      expect(first.size_bytes).toBe(5);
    });

    it('shows members only their own files and those shared with them; use, edit and owner decide what they may do', async () => {
      const file = await uploaded(alice, 'quarterly numbers', 'numbers.csv', 'text/csv');
      expectError(await t.as(bob).op('getFile', { params: { id: file.id } }), 404, 'not_found');
      expect((await downloadBytes(bob, file.id)).status).toBe(404);
      expect((await t.as(bob).op('listFiles')).body.data.map((f: { id: string }) => f.id)).not.toContain(file.id);
      // The owner of the organization sees none of it either: files are not the organization's to browse.
      expectError(await t.as(owner).op('getFile', { params: { id: file.id } }), 404, 'not_found');

      const shared = await t.as(alice).op('shareFile', { params: { id: file.id }, body: { principal: { type: 'team', id: teamId }, level: 'use' } });
      expect(shared.status).toBe(201);
      expect(shared.headers.get('location')).toBe(`/file/${file.id}/share/${shared.body.id}`);
      expect((await t.as(bob).op('getFile', { params: { id: file.id } })).body.caller_access).toBe('use');
      expect((await downloadBytes(bob, file.id)).bytes.toString()).toBe('quarterly numbers');
      expectError(await t.as(bob).op('listFileShares', { params: { id: file.id } }), 403, 'insufficient_access');
      expectError(
        await t.as(bob).op('shareFile', { params: { id: file.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } }),
        403,
        'insufficient_access',
      );

      const again = await t.as(alice).op('shareFile', { params: { id: file.id }, body: { principal: { type: 'team', id: teamId }, level: 'edit' } });
      expect([again.status, again.body.id, again.body.level]).toEqual([200, shared.body.id, 'edit']);
      expect((await t.as(bob).op('getFile', { params: { id: file.id } })).body.caller_access).toBe('edit');
      expect((await t.as(bob).op('listFileShares', { params: { id: file.id } })).body.data).toHaveLength(1);
      expectError(await t.as(bob).op('deleteFile', { params: { id: file.id } }), 403, 'insufficient_access');
      expectError(
        await t.as(alice).op('shareFile', { params: { id: file.id }, body: { principal: { type: 'user', id: `usr_${'0'.repeat(25)}9` }, level: 'use' } }),
        400,
        'unknown_reference',
      );

      expect((await t.as(bob).op('revokeFileShare', { params: { id: file.id, aclId: shared.body.id } })).status).toBe(204);
      expectError(await t.as(bob).op('getFile', { params: { id: file.id } }), 404, 'not_found');
      expectError(await t.as(alice).op('revokeFileShare', { params: { id: file.id, aclId: shared.body.id } }), 404, 'not_found');
      const actions = (await t.factories.auditEntries(org.orgId)).filter((e) => e.target_id === file.id).map((e) => e.action);
      expect(actions).toEqual(['file.created', 'file.shared', 'file.shared', 'file.share_revoked']);
    });

    it('deletes a file with its bytes and shares; deleting again is 404', async () => {
      const file = await uploaded(alice, 'to be deleted');
      const key = (await keyOf(file.id)) as string;
      await t.as(alice).op('shareFile', { params: { id: file.id }, body: { principal: { type: 'organization', id: org.orgId }, level: 'use' } });
      expect((await t.as(alice).op('deleteFile', { params: { id: file.id } })).status).toBe(204);
      expect(await storage().has(key)).toBe(false);
      expect(await t.db.selectFrom('shares').select('id').where('resource_id', '=', file.id).execute()).toEqual([]);
      expect(await t.db.selectFrom('storage_sweeps').select('key').where('key', '=', key).execute()).toEqual([]);
      expectError(await t.as(alice).op('deleteFile', { params: { id: file.id } }), 404, 'not_found');
      expectError(await t.as(alice).op('getFile', { params: { id: file.id } }), 404, 'not_found');
      expect((await downloadBytes(alice, file.id)).status).toBe(404);
      expect(await t.factories.auditEntries(org.orgId, 'file.deleted')).toEqual(expect.arrayContaining([expect.objectContaining({ target_id: file.id })]));
    });

    it('keeps organizations apart: another organization’s file is 404 and stays as it was', async () => {
      const file = await uploaded(alice, 'ours');
      const other = await t.factories.org();
      const stranger = { token: other.token, org: other.orgId };
      expectError(await t.as(stranger).op('getFile', { params: { id: file.id } }), 404, 'not_found');
      expectError(await t.as(stranger).op('deleteFile', { params: { id: file.id } }), 404, 'not_found');
      expectError(await t.as(stranger).op('listFileShares', { params: { id: file.id } }), 404, 'not_found');
      expect((await downloadBytes(stranger, file.id)).status).toBe(404);
      expect((await t.as(alice).op('getFile', { params: { id: file.id } })).status).toBe(200);
    });

    it('needs file:view to read and file:manage to upload; no credential is 401', async () => {
      const viewer = { token: await t.factories.token(org.orgId, aliceId, ['file:view']), org: org.orgId };
      const nobody = { token: await t.factories.token(org.orgId, aliceId, ['team:view']), org: org.orgId };
      expect((await t.as(viewer).op('listFiles')).status).toBe(200);
      expectError(await upload(viewer, [{ name: 'file', filename: 'a.txt', data: 'a' }]), 403, 'missing_permission');
      expectError(await t.as(nobody).op('listFiles'), 403, 'missing_permission');
      expectError(await t.as({ org: org.orgId }).get('/file'), 401, 'unauthenticated');
      expectError(await t.as(alice).get('/file/not-a-file'), 400, 'validation_failed');
    });

    it('walks every page of the list once, and refuses filters naming nothing', async () => {
      const who = { token: (await t.factories.org()).token, org: '' };
      const seeded = await t.factories.org();
      who.token = seeded.token;
      who.org = seeded.orgId;
      const ids: string[] = [];
      for (let i = 0; i < 5; i += 1) ids.push((await uploaded(who, `file ${i}`)).id);
      const seen: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await t.as(who).op('listFiles', { query: { limit: 2, ...(cursor ? { cursor } : {}) } });
        seen.push(...page.body.data.map((f: { id: string }) => f.id));
        cursor = page.body.next_cursor ?? undefined;
      } while (cursor);
      expect(seen).toEqual(ids);
      expect((await t.as(who).op('listFiles', { query: { source: 'upload_request' } })).body.data).toEqual([]);
      expectError(await t.as(who).op('listFiles', { query: { owner_user_id: aliceId } }), 400, 'unknown_reference');
      expectError(await t.as(who).op('listFiles', { query: { upload_request_id: `upreq_${'0'.repeat(25)}1` } }), 400, 'unknown_reference');
    });

    if (backend === 's3') {
      it('answers 503 with Retry-After while the bucket cannot be reached, stores nothing, and serves again once it is back', async () => {
        const kept = await uploaded(alice, 'stored before the outage');
        const port = Number(new URL(t.deps.config.files.storage.backend === 's3' ? (t.deps.config.files.storage.endpoint ?? '') : '').port);
        await s3?.close();
        try {
          const before = (
            await t.db
              .selectFrom('tool_files')
              .select((eb) => eb.fn.countAll<number>().as('n'))
              .executeTakeFirstOrThrow()
          ).n;
          const refused = await upload(alice, [{ name: 'file', filename: 'during.txt', type: 'text/plain', data: 'during the outage' }]);
          expectError(refused, 503, 'service_unavailable');
          expect(refused.headers.get('retry-after')).toBe('5');
          expect(refused.body.detail).toBe('The file storage cannot be reached right now; retry shortly.');
          const after = (
            await t.db
              .selectFrom('tool_files')
              .select((eb) => eb.fn.countAll<number>().as('n'))
              .executeTakeFirstOrThrow()
          ).n;
          expect(after).toBe(before);
          const download = await t.as(alice).get(`/file/${kept.id}/content`);
          expectError(download, 503, 'service_unavailable');
        } finally {
          s3 = new S3rver({ port, address: '127.0.0.1', silent: true, directory: s3Dir as string, configureBuckets: [{ name: 'tool-files', configs: [] }] });
          await s3.run();
        }
        expect((await downloadBytes(alice, kept.id)).bytes.toString()).toBe('stored before the outage');
        await uploaded(alice, 'after the outage');
      });
    }
  });

  describe('upload requests', () => {
    const ask = (body: Record<string, unknown>) => t.as(owner).op('createUploadRequest', { body: body as never });
    const reserve = (who: Caller, id: string, body: { name: string; content_type: string; size_bytes: number }) =>
      t.as(who).op('reserveUploadRequestFile', { params: { id }, body });
    const put = (who: Caller, path: string | null, data: Buffer, type = 'application/octet-stream') =>
      t.as(who).put(path as string, undefined, { raw: data, headers: { 'content-type': type } });

    it('goes from request to confirmed files: reserve, send exactly the reserved bytes, replace them, remove one, confirm', async () => {
      const made = await ask({
        assignee_email: (await t.db.selectFrom('users').select('email').where('id', '=', aliceId).executeTakeFirstOrThrow()).email.toUpperCase(),
        message: 'The signed Q3 reports, please.',
        accepted_content_types: ['application/pdf'],
        max_files: 3,
      });
      expect(made.status).toBe(201);
      const request = made.body;
      expect(made.headers.get('location')).toBe(`/file/upload-request/${request.id}`);
      expect(request).toMatchObject({
        requester_user_id: org.ownerId,
        assignee_user_id: aliceId,
        status: 'open',
        files: [],
        max_file_bytes: LIMIT,
        max_files: 3,
      });
      const mail = await waitFor(() => smtp.messages.find((m) => m.to.includes(request.assignee_email) && decodedText(m).includes(request.id)));
      expect(decodedText(mail)).toContain('The signed Q3 reports, please.');

      // Only the two people it names see it; only the assignee adds files.
      expect((await t.as(alice).op('getUploadRequest', { params: { id: request.id } })).body.id).toBe(request.id);
      expectError(await t.as(bob).op('getUploadRequest', { params: { id: request.id } }), 404, 'not_found');
      expectError(await reserve(owner, request.id, { name: 'a.pdf', content_type: 'application/pdf', size_bytes: 10 }), 403, 'insufficient_access');
      expectError(await reserve(bob, request.id, { name: 'a.pdf', content_type: 'application/pdf', size_bytes: 10 }), 404, 'not_found');
      expectError(await reserve(alice, request.id, { name: 'a.png', content_type: 'image/png', size_bytes: 10 }), 400, 'validation_failed');
      expectError(await reserve(alice, request.id, { name: 'a.pdf', content_type: 'application/pdf', size_bytes: LIMIT + 1 }), 400, 'validation_failed');

      const reserved = await reserve(alice, request.id, { name: 'Q3 report.pdf', content_type: 'application/pdf', size_bytes: PDF.length });
      expect(reserved.status).toBe(201);
      const staged = reserved.body;
      expect(staged).toMatchObject({ status: 'reserved', sha256: null, upload_url: `/file/upload-request/${request.id}/file/${staged.id}` });
      expect(reserved.headers.get('location')).toBe(staged.upload_url);

      // Fewer bytes, more bytes, the wrong kind of bytes, the wrong media type: refused, nothing kept.
      expectError(await put(alice, staged.upload_url, PDF.subarray(0, 100)), 400, 'file_size_mismatch');
      expectError(await put(alice, staged.upload_url, Buffer.concat([PDF, Buffer.from('x')])), 413, 'payload_too_large');
      expectError(await put(alice, staged.upload_url, Buffer.concat([PNG, randomBytes(PDF.length - PNG.length)])), 400, 'file_type_mismatch');
      expectError(await put(alice, staged.upload_url, randomBytes(PDF.length).fill(0x41)), 400, 'file_type_mismatch');
      expectError(await put(alice, staged.upload_url, PDF, 'application/pdf'), 415, 'unsupported_media_type');
      expectError(await put(owner, staged.upload_url, PDF), 403, 'insufficient_access');
      expect(await keyOf(staged.id)).toBeNull();

      // A Content-Digest (RFC 9530) that is not the bytes': refused, nothing kept; a right one is checked and passes.
      const digest = (bytes: Buffer) => `sha-256=:${createHash('sha256').update(bytes).digest('base64')}:`;
      const withDigest = (data: Buffer, header: string) =>
        t
          .as(alice)
          .put(staged.upload_url as string, undefined, { raw: data, headers: { 'content-type': 'application/octet-stream', 'content-digest': header } });
      expectError(await withDigest(PDF, digest(Buffer.from('other bytes'))), 400, 'validation_failed');
      expectError(await withDigest(PDF, 'sha-256=:bm90IDMyIGJ5dGVz:'), 400, 'validation_failed');
      expect(await keyOf(staged.id)).toBeNull();
      expect((await withDigest(PDF, `sha-512=:AAAA:, ${digest(PDF)}`)).status).toBe(200);
      const sent = await put(alice, staged.upload_url, PDF);
      expect(sent.status).toBe(200);
      expect(sent.body).toMatchObject({ status: 'uploaded', sha256: sha256(PDF), size_bytes: PDF.length });
      const firstKey = (await keyOf(staged.id)) as string;
      const second = Buffer.concat([Buffer.from('%PDF-1.4\n'), randomBytes(PDF.length - 9)]);
      expect((await put(alice, staged.upload_url, second)).body.sha256).toBe(sha256(second));
      expect(await storage().has(firstKey)).toBe(false);

      const spare = (await reserve(alice, request.id, { name: 'annex.pdf', content_type: 'application/pdf', size_bytes: 50 })).body;
      expectError(await t.as(alice).op('confirmUploadRequest', { params: { id: request.id } }), 409, 'upload_incomplete');
      expect((await t.as(alice).op('deleteUploadRequestFile', { params: { id: request.id, file_id: spare.id } })).status).toBe(204);
      expectError(await t.as(alice).op('deleteUploadRequestFile', { params: { id: request.id, file_id: spare.id } }), 404, 'not_found');
      // A staged file is nobody's tool file yet.
      expectError(await t.as(owner).op('getFile', { params: { id: staged.id } }), 404, 'not_found');

      const confirmed = await t.as(alice).op('confirmUploadRequest', { params: { id: request.id } });
      expect(confirmed.status).toBe(200);
      expect(confirmed.body).toMatchObject({ status: 'confirmed', files: [{ id: staged.id, status: 'uploaded', upload_url: null }] });
      expect(confirmed.body.confirmed_at).not.toBeNull();
      const file = (await t.as(owner).op('getFile', { params: { id: staged.id } })).body;
      expect(file).toMatchObject({
        owner_user_id: org.ownerId,
        source: 'upload_request',
        upload_request_id: request.id,
        sha256: sha256(second),
        caller_access: 'owner',
      });
      expect(sha256((await downloadBytes(owner, staged.id)).bytes)).toBe(sha256(second));
      expect((await t.as(owner).op('listFiles', { query: { upload_request_id: request.id } })).body.data.map((f: { id: string }) => f.id)).toEqual([staged.id]);
      // The assignee keeps no access.
      expectError(await t.as(alice).op('getFile', { params: { id: staged.id } }), 404, 'not_found');
      expectError(await t.as(alice).op('confirmUploadRequest', { params: { id: request.id } }), 409, 'invalid_transition');
      expectError(await reserve(alice, request.id, { name: 'late.pdf', content_type: 'application/pdf', size_bytes: 5 }), 409, 'invalid_transition');
      await waitFor(() => smtp.messages.find((m) => decodedText(m).includes('confirmed your upload request')));

      const actions = (await t.factories.auditEntries(org.orgId)).filter((e) => e.target_id === request.id).map((e) => e.action);
      expect(actions).toEqual([
        'upload_request.created',
        'upload_request.file_reserved',
        'upload_request.file_uploaded',
        'upload_request.file_uploaded',
        'upload_request.file_uploaded',
        'upload_request.file_reserved',
        'upload_request.file_removed',
        'upload_request.confirmed',
      ]);
    });

    it('holds a streamed body (no Content-Length) to the reserved size as it arrives: longer is 413, shorter file_size_mismatch', async () => {
      const request = (await ask({ assignee_user_id: aliceId })).body;
      const staged = (await reserve(alice, request.id, { name: 'streamed.bin', content_type: 'application/octet-stream', size_bytes: 64 * KiB })).body;
      const chunked = async (chunks: Buffer[]) => {
        const body = new ReadableStream<Uint8Array>({
          start(controller) {
            for (const chunk of chunks) controller.enqueue(chunk);
            controller.close();
          },
        });
        const res = await fetch(`${t.url}${staged.upload_url}`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${alice.token}`, 'x-organization-id': alice.org, 'content-type': 'application/octet-stream' },
          body,
          duplex: 'half',
        } as RequestInit);
        return { status: res.status, headers: res.headers, body: (await res.json()) as unknown };
      };
      expectError(await chunked([randomBytes(32 * KiB), randomBytes(32 * KiB), randomBytes(32 * KiB)]), 413, 'payload_too_large');
      expectError(await chunked([randomBytes(32 * KiB)]), 400, 'file_size_mismatch');
      expect(await keyOf(staged.id)).toBeNull();
      const exact = [randomBytes(32 * KiB), randomBytes(32 * KiB)];
      const sent = await chunked(exact);
      expect([sent.status, (sent.body as { sha256: string }).sha256]).toEqual([200, sha256(Buffer.concat(exact))]);
    });

    it('holds at most max_files, counts reservations against the quota, and needs at least one file to confirm', async () => {
      const request = (await ask({ assignee_user_id: aliceId, max_files: 1 })).body;
      expectError(await t.as(alice).op('confirmUploadRequest', { params: { id: request.id } }), 409, 'upload_incomplete');
      expect((await reserve(alice, request.id, { name: 'one.txt', content_type: 'text/plain', size_bytes: 3 })).status).toBe(201);
      expectError(await reserve(alice, request.id, { name: 'two.txt', content_type: 'text/plain', size_bytes: 3 }), 409, 'upload_request_full');

      // Reservations count against the plan's storage by their declared size.
      const other = await t.factories.org();
      const memberId = await t.factories.member(other.orgId);
      const member = { token: await t.factories.token(other.orgId, memberId), org: other.orgId };
      const asked = (await t.as({ token: other.token, org: other.orgId }).op('createUploadRequest', { body: { assignee_user_id: memberId } })).body;
      await t.db
        .insertInto('tool_files')
        .values({
          id: `file_${'0'.repeat(25)}2`,
          org_id: other.orgId,
          owner_user_id: other.ownerId,
          name: 'old.bin',
          content_type: 'application/octet-stream',
          size_bytes: 10 * 1024 ** 3 - 100,
          sha256: sha256('old'),
          storage_key: `file/${other.orgId}/old/${unique()}`,
          source: 'uploaded',
          upload_request_id: null,
          state: 'stored',
          uploaded_at: new Date(),
        })
        .execute();
      expectError(await reserve(member, asked.id, { name: 'x.bin', content_type: 'application/octet-stream', size_bytes: 101 }), 403, 'entitlement_exceeded');
      expect((await reserve(member, asked.id, { name: 'x.bin', content_type: 'application/octet-stream', size_bytes: 100 })).status).toBe(201);
      expectError(await reserve(member, asked.id, { name: 'y.bin', content_type: 'application/octet-stream', size_bytes: 1 }), 403, 'entitlement_exceeded');
      expect((await t.as({ token: other.token, org: other.orgId }).op('getEntitlements')).body.limits.file_storage_bytes.used).toBe(10 * 1024 ** 3);
    });

    it('lets the requester cancel and the assignee decline; staged bytes go, and nothing more can be done', async () => {
      const first = (await ask({ assignee_user_id: aliceId })).body;
      const staged = (await reserve(alice, first.id, { name: 'a.txt', content_type: 'text/plain', size_bytes: 5 })).body;
      expect((await put(alice, staged.upload_url, Buffer.from('hello'))).status).toBe(200);
      const key = (await keyOf(staged.id)) as string;
      expectError(await t.as(alice).op('cancelUploadRequest', { params: { id: first.id } }), 403, 'insufficient_access');
      const cancelled = await t.as(owner).op('cancelUploadRequest', { params: { id: first.id } });
      expect(cancelled.body).toMatchObject({ status: 'cancelled', files: [] });
      expect(await storage().has(key)).toBe(false);
      expectError(await put(alice, staged.upload_url, Buffer.from('hello')), 409, 'invalid_transition');
      expectError(await t.as(owner).op('cancelUploadRequest', { params: { id: first.id } }), 409, 'invalid_transition');

      const second = (await ask({ assignee_user_id: aliceId, message: 'Last year’s invoices' })).body;
      expectError(await t.as(owner).op('declineUploadRequest', { params: { id: second.id } }), 403, 'insufficient_access');
      expectError(await t.as(bob).op('declineUploadRequest', { params: { id: second.id } }), 404, 'not_found');
      expect((await t.as(alice).op('declineUploadRequest', { params: { id: second.id } })).body.status).toBe('declined');
      expectError(await t.as(alice).op('confirmUploadRequest', { params: { id: second.id } }), 409, 'invalid_transition');
      await waitFor(() => smtp.messages.find((m) => decodedText(m).includes('declined your upload request')));
      expect((await t.factories.auditEntries(org.orgId, 'upload_request.declined')).map((e) => e.target_id)).toContain(second.id);
    });

    it('refuses a request naming both, neither or no active member, an expiry out of range, or files above the per-file limit', async () => {
      const problems: [Record<string, unknown>, number, string][] = [
        [{ assignee_user_id: aliceId, assignee_email: 'a@example.com' }, 400, 'validation_failed'],
        [{ message: 'nobody' }, 400, 'validation_failed'],
        [{ assignee_user_id: aliceId, expires_at: new Date(Date.now() - 1000).toISOString() }, 400, 'validation_failed'],
        [{ assignee_user_id: aliceId, expires_at: new Date(Date.now() + 31 * 86_400_000).toISOString() }, 400, 'validation_failed'],
        [{ assignee_user_id: aliceId, max_file_bytes: LIMIT + 1 }, 400, 'validation_failed'],
        [{ assignee_user_id: aliceId, accepted_content_types: ['Image/PNG'] }, 400, 'validation_failed'],
        [{ assignee_user_id: aliceId, surprise: true }, 400, 'validation_failed'],
        [{ assignee_email: 'nobody-here@example.com' }, 400, 'unknown_reference'],
        [{ assignee_user_id: `usr_${'0'.repeat(25)}7` }, 400, 'unknown_reference'],
      ];
      const before = (await t.factories.auditEntries(org.orgId, 'upload_request.created')).length;
      for (const [body, status, code] of problems) expectError(await ask(body), status, code);
      expect((await t.factories.auditEntries(org.orgId, 'upload_request.created')).length).toBe(before);
      const other = await t.factories.org();
      expectError(
        await t.as({ token: other.token, org: other.orgId }).op('createUploadRequest', { body: { assignee_user_id: aliceId } }),
        400,
        'unknown_reference',
      );
    });

    it('expires: the sweeper closes requests past expires_at, removes stale reservations and deletes bytes no row names', async () => {
      const request = (await ask({ assignee_user_id: aliceId })).body;
      const staged = (await reserve(alice, request.id, { name: 'a.txt', content_type: 'text/plain', size_bytes: 5 })).body;
      await put(alice, staged.upload_url, Buffer.from('hello'));
      const key = (await keyOf(staged.id)) as string;
      const other = (await ask({ assignee_user_id: aliceId })).body;
      const stale = (await reserve(alice, other.id, { name: 'b.txt', content_type: 'text/plain', size_bytes: 5 })).body;
      await t.db
        .updateTable('upload_requests')
        .set({ expires_at: new Date(Date.now() - 1000) })
        .where('id', '=', request.id)
        .execute();
      expect((await t.as(alice).op('getUploadRequest', { params: { id: request.id } })).body).toMatchObject({ status: 'expired', files: [] });
      expectError(await put(alice, staged.upload_url, Buffer.from('hello')), 409, 'invalid_transition');
      await t.db
        .updateTable('tool_files')
        .set({ created_at: new Date(Date.now() - 2 * 86_400_000) })
        .where('id', '=', stale.id)
        .execute();
      // Bytes stored by a transaction that never committed: noted, and past their grace period.
      const orphan = `file/${org.orgId}/${stale.id}/${unique()}`;
      await storage().put(orphan, Buffer.from('orphaned'));
      await t.db
        .insertInto('storage_sweeps')
        .values({ key: orphan, delete_after: new Date(Date.now() - 1000) })
        .execute();

      const outcome = await sweep(t.deps);
      expect(outcome.expired).toBeGreaterThanOrEqual(1);
      expect(outcome.reservationsRemoved).toBeGreaterThanOrEqual(1);
      expect(await storage().has(key)).toBe(false);
      expect(await storage().has(orphan)).toBe(false);
      expect((await t.db.selectFrom('upload_requests').select('status').where('id', '=', request.id).executeTakeFirstOrThrow()).status).toBe('expired');
      expect((await t.as(alice).op('getUploadRequest', { params: { id: other.id } })).body.files).toEqual([]);
      expect(await t.db.selectFrom('storage_sweeps').select('key').where('delete_after', '<=', new Date()).execute()).toEqual([]);
    });

    it('sweeps the bytes of an organization that is deleted, whatever deleted its rows', async () => {
      const gone = await t.factories.org();
      const file = await uploaded({ token: gone.token, org: gone.orgId }, 'short-lived');
      const key = (await keyOf(file.id)) as string;
      await t.db.deleteFrom('organizations').where('id', '=', gone.orgId).execute();
      expect(await storage().has(key)).toBe(true);
      await sweep(t.deps);
      expect(await storage().has(key)).toBe(false);
    });

    it('lists the requests the caller made or was asked in, by role and status, a page at a time; nobody else’s', async () => {
      const fresh = await t.factories.org();
      const requester = { token: fresh.token, org: fresh.orgId };
      const askedId = await t.factories.member(fresh.orgId);
      const asked = { token: await t.factories.token(fresh.orgId, askedId), org: fresh.orgId };
      const outsider = { token: await t.factories.token(fresh.orgId, await t.factories.member(fresh.orgId)), org: fresh.orgId };
      const ids: string[] = [];
      for (let i = 0; i < 3; i += 1) ids.push((await t.as(requester).op('createUploadRequest', { body: { assignee_user_id: askedId } })).body.id);
      await t.as(requester).op('cancelUploadRequest', { params: { id: ids[0] as string } });
      await t.db
        .updateTable('upload_requests')
        .set({ expires_at: new Date(Date.now() - 1000) })
        .where('id', '=', ids[1] as string)
        .execute();
      const seen: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await t.as(asked).op('listUploadRequests', { query: { limit: 2, ...(cursor ? { cursor } : {}) } });
        seen.push(...page.body.data.map((r: { id: string }) => r.id));
        cursor = page.body.next_cursor ?? undefined;
      } while (cursor);
      expect(seen).toEqual(ids);
      const ofStatus = async (who: Caller, query: Record<string, string>) =>
        (await t.as(who).op('listUploadRequests', { query: query as never })).body.data.map((r: { id: string; status: string }) => [r.id, r.status]);
      expect(await ofStatus(asked, { status: 'open' })).toEqual([[ids[2], 'open']]);
      expect(await ofStatus(asked, { status: 'expired' })).toEqual([[ids[1], 'expired']]);
      expect(await ofStatus(requester, { role: 'requester', status: 'cancelled' })).toEqual([[ids[0], 'cancelled']]);
      expect(await ofStatus(requester, { role: 'assignee' })).toEqual([]);
      expect(await ofStatus(outsider, {})).toEqual([]);
      expectError(await t.as(asked).op('listUploadRequests', { query: { role: 'owner' as never } }), 400, 'validation_failed');
    });

    it('cancels the open requests of a member who is removed', async () => {
      const carolId = await t.factories.member(org.orgId);
      const request = (await ask({ assignee_user_id: carolId })).body;
      expect((await t.as(owner).op('removeMember', { params: { userId: carolId } })).status).toBe(204);
      expect((await t.as(owner).op('getUploadRequest', { params: { id: request.id } })).body.status).toBe('cancelled');
    });
  });
});

async function waitFor<T>(find: () => T | undefined, ms = 5000): Promise<T> {
  for (let waited = 0; waited < ms; waited += 25) {
    const found = find();
    if (found !== undefined) return found;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error('not found in time');
}
