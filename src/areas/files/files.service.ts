import type { Readable } from 'node:stream';
import type { components } from '../../../generated/openapi';
import { requireBytesWithin } from '../../access/entitlements';
import { deleteSharesOf, listShares, revokeShare, shareResource, shareAuditChanges, type Share } from '../../access/shares';
import type { Executor } from '../../db/database';
import type { RequestContext } from '../../http/context';
import { ApiError, notFound, validationError, type ValidationProblem } from '../../http/errors';
import type { UploadedFile } from '../../http/handler-types';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { storageOf } from '../../lib/storage';
import { checked, collect, discard, fileKey, Intake, recorded, storeBytes } from './files.bytes';
import * as repo from './files.repo';

type ToolFile = components['schemas']['ToolFile'];
type ToolFileAccess = components['schemas']['ToolFileAccess'];
type ShareCreate = components['schemas']['ShareCreate'];

const WHAT = 'file';

export function toToolFile(row: repo.FileRow, access: ToolFileAccess): ToolFile {
  return {
    id: row.id,
    name: row.name,
    content_type: row.content_type,
    size_bytes: Number(row.size_bytes),
    sha256: row.sha256 as string,
    owner_user_id: row.owner_user_id,
    source: row.source,
    upload_request_id: row.upload_request_id,
    caller_access: access,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** What the caller may do with each of the files: own it, or the best share level reaching them. */
async function accessTo(db: Executor, ctx: RequestContext, rows: readonly repo.FileRow[]): Promise<Map<string, ToolFileAccess>> {
  const levels = await repo.shareLevels(
    db,
    ctx.orgId,
    ctx.user,
    rows.filter((r) => r.owner_user_id !== ctx.user).map((r) => r.id),
  );
  return new Map(rows.map((r) => [r.id, r.owner_user_id === ctx.user ? 'owner' : (levels.get(r.id) ?? 'use')]));
}

/** A tool file the caller reaches, and what they may do with it; 404 otherwise (never revealing that it exists). */
async function reachable(db: Executor, ctx: RequestContext, id: string): Promise<{ row: repo.FileRow; access: ToolFileAccess }> {
  const row = await repo.findReachableFile(db, ctx.orgId, ctx.user, id);
  if (!row) throw notFound(WHAT, id);
  const access = (await accessTo(db, ctx, [row])).get(row.id) as ToolFileAccess;
  return { row, access };
}

/** 403 unless the caller owns the file or holds an `edit` share of it. */
function requireEdit(access: ToolFileAccess, id: string): void {
  if (access === 'use')
    throw new ApiError('insufficient_access', `File ${id} is shared with you to use; only its owner or a holder of an edit share may do this.`);
}

/** The organization's file_storage_bytes limit, with `adding` more bytes: 403 when they would pass it. */
export function requireRoom(db: Executor, orgId: string, adding: number): Promise<void> {
  return requireBytesWithin(db, orgId, 'file_storage_bytes', adding, () => repo.storedBytes(db, orgId));
}

export async function list(
  ctx: RequestContext,
  page: PageRequest,
  filter: { source?: repo.FileRow['source']; owner_user_id?: string; upload_request_id?: string },
): Promise<Page<ToolFile>> {
  const problems: ValidationProblem[] = [];
  if (filter.owner_user_id !== undefined && !(await repo.isMember(ctx.db, ctx.orgId, filter.owner_user_id, false))) {
    problems.push({ in: 'query', pointer: '/owner_user_id', message: 'is not a member of this organization' });
  }
  if (filter.upload_request_id !== undefined && !(await repo.uploadRequestExists(ctx.db, ctx.orgId, filter.upload_request_id))) {
    problems.push({ in: 'query', pointer: '/upload_request_id', message: 'names no upload request of this organization' });
  }
  if (problems.length > 0) throw new ApiError('unknown_reference', 'A filter names something that does not exist in this organization.', { errors: problems });
  const rows = await repo.listReachableFiles(ctx.db, ctx.orgId, ctx.user, page, filter);
  const access = await accessTo(ctx.db, ctx, rows.slice(0, page.limit));
  return toPage(rows, page, (row) => toToolFile(row, access.get(row.id) as ToolFileAccess));
}

export async function get(ctx: RequestContext, id: string): Promise<ToolFile> {
  const { row, access } = await reachable(ctx.db, ctx, id);
  return toToolFile(row, access);
}

/**
 * Stores an uploaded file (the multipart part, spooled to disk under the per-file limit by
 * the body reader) as a tool file of the caller: quota checked before the bytes are copied
 * and again, under the organization's lock, in the transaction that records them.
 */
export async function upload(ctx: RequestContext, body: { file: UploadedFile; name?: string }): Promise<ToolFile> {
  const name = body.name ?? body.file.filename ?? '';
  if (!validName(name)) {
    throw validationError([
      {
        in: 'body',
        pointer: body.name !== undefined ? '/name' : '/file',
        message:
          body.name !== undefined
            ? 'is not a file name (no `/`, `\\`, control characters, `.` or `..`)'
            : "the part's filename is missing or not a file name; send a `name` part",
      },
    ]);
  }
  const contentType = mediaType(body.file.contentType);
  if (!contentType) {
    throw validationError([{ in: 'body', pointer: '/file', message: `the part's Content-Type ${JSON.stringify(body.file.contentType)} is not a media type` }]);
  }
  const size = body.file.size;
  await requireRoom(ctx.db, ctx.orgId, size);
  const id = newId('file');
  const key = fileKey(ctx.orgId, id);
  const stored = await storeBytes(ctx.deps, key, () => checked(body.file.open(), new Intake({ exact: size })), size);
  try {
    const row = await ctx.write(async (w) => {
      await requireRoom(w.db, ctx.orgId, stored.size);
      const inserted = await repo.insertFile(w.db, {
        id,
        org_id: ctx.orgId,
        owner_user_id: ctx.user,
        name,
        content_type: contentType,
        size_bytes: stored.size,
        sha256: stored.sha256,
        storage_key: key,
        source: 'uploaded',
        upload_request_id: null,
        state: 'stored',
        uploaded_at: new Date(),
      });
      await recorded(w.db, key);
      w.audit({ targetId: id, changes: { name, content_type: contentType, size_bytes: stored.size, sha256: stored.sha256 } });
      return inserted;
    });
    return toToolFile(row, 'owner');
  } catch (err) {
    // Not recorded: the bytes go now rather than at the sweep after the grace period.
    await discard(ctx.deps, [key]);
    throw err;
  }
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  const key = await ctx.write(async (w) => {
    const { row, access } = await reachable(w.db, ctx, id);
    if (access !== 'owner') throw new ApiError('insufficient_access', `Only the owner of file ${id} may delete it.`);
    await repo.deleteFile(w.db, ctx.orgId, id);
    await deleteSharesOf(w.db, ctx.orgId, 'file', id);
    w.audit({ targetId: id, changes: { name: row.name, owner_user_id: row.owner_user_id, size_bytes: Number(row.size_bytes), sha256: row.sha256 } });
    return row.storage_key;
  });
  if (key) await collect(ctx.deps, [key]);
}

export async function listFileShares(ctx: RequestContext, id: string, page: PageRequest): Promise<Page<Share>> {
  const { access } = await reachable(ctx.db, ctx, id);
  requireEdit(access, id);
  return listShares(ctx.db, ctx.orgId, 'file', id, page);
}

export async function share(ctx: RequestContext, id: string, body: ShareCreate): Promise<{ share: Share; created: boolean }> {
  return ctx.write(async (w) => {
    const { access } = await reachable(w.db, ctx, id);
    requireEdit(access, id);
    const result = await shareResource(w.db, { orgId: ctx.orgId, resourceType: 'file', resourceId: id, share: body, byUserId: ctx.user });
    w.audit({ targetId: id, changes: shareAuditChanges(result, body) });
    return result;
  });
}

export async function revokeFileShare(ctx: RequestContext, id: string, shareId: string): Promise<void> {
  await ctx.write(async (w) => {
    const { access } = await reachable(w.db, ctx, id);
    requireEdit(access, id);
    const revoked = await revokeShare(w.db, ctx.orgId, 'file', id, shareId);
    if (!revoked) throw new ApiError('not_found', `No share ${shareId} of file ${id} in this organization.`);
    w.audit({ targetId: id, changes: { share_id: shareId, principal: { type: revoked.principal_type, id: revoked.principal_id }, level: revoked.level } });
  });
}

/** A file's bytes, streamed from storage, with what the response says of them. */
export async function download(ctx: RequestContext, id: string): Promise<{ row: repo.FileRow; stream: Readable }> {
  const { row } = await reachable(ctx.db, ctx, id);
  const stream = row.storage_key ? await storageOf(ctx.deps.config).getStream(row.storage_key) : null;
  if (!stream) {
    ctx.log.error({ file_id: id }, 'a stored file has no bytes in storage');
    throw new ApiError('not_found', `The bytes of file ${id} are missing from storage.`);
  }
  return { row, stream };
}

/**
 * `attachment` with the name twice (RFC 6266): `filename` ASCII-only for old clients (other
 * characters, quotes and backslashes as `_`), `filename*` exact, percent-encoded UTF-8
 * (RFC 8187: only attr-chars stay as they are).
 */
export function contentDisposition(name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]|["\\%]/g, '_');
  const exact = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${ascii}"; filename*=UTF-8''${exact}`;
}

/** ToolFileName's rules, beyond its pattern: not `.` or `..`. */
export function validName(name: string): boolean {
  // eslint-disable-next-line no-control-regex -- control characters are exactly what a name may not hold
  return name.length >= 1 && name.length <= 255 && !/[/\\\x00-\x1f\x7f]/.test(name) && name !== '.' && name !== '..';
}

const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*(; ?[a-z0-9!#$&^_.+-]+=[A-Za-z0-9!#$&^_.+-]+)*$/;

/** A part's Content-Type as ToolFileMediaType: lowercase type and parameter names, no spaces but one after `;`. */
function mediaType(raw: string): string | null {
  const [type = '', ...params] = raw.split(';').map((p) => p.trim());
  const normal = [
    type.toLowerCase(),
    ...params
      .filter((p) => p !== '')
      .map((p) => {
        const eq = p.indexOf('=');
        return eq < 0
          ? p
          : `${p.slice(0, eq).trim().toLowerCase()}=${p
              .slice(eq + 1)
              .trim()
              .replace(/^"(.*)"$/, '$1')}`;
      }),
  ].join('; ');
  return normal.length <= 255 && MEDIA_TYPE.test(normal) ? normal : null;
}
