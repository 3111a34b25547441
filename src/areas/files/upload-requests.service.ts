import type { components } from '../../../generated/openapi';
import type { Executor } from '../../db/database';
import type { AppDeps, RequestContext, WriteScope } from '../../http/context';
import { ApiError, notFound, validationError } from '../../http/errors';
import type { UploadStream } from '../../http/handler-types';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { inRange } from '../../lib/sniff';
import { checked, collect, discard, fileKey, Intake, recorded, storeBytes } from './files.bytes';
import * as repo from './files.repo';
import { requireRoom, validName } from './files.service';

type UploadRequest = components['schemas']['UploadRequest'];
type UploadRequestFile = components['schemas']['UploadRequestFile'];
type Create = components['schemas']['UploadRequestCreate'];
type Reserve = components['schemas']['UploadRequestFileReserve'];

const WHAT = 'upload request';
const DAY_MS = 86_400_000;
const DEFAULT_DAYS = 7;
const MAX_DAYS = 30;

/** `expired` as soon as `expires_at` passes, before the sweeper records it. */
function statusOf(row: repo.UploadRequestRow, now: Date): UploadRequest['status'] {
  return row.status === 'open' && row.expires_at <= now ? 'expired' : row.status;
}

const uploadUrl = (requestId: string, fileId: string) => `/file/upload-request/${requestId}/file/${fileId}`;

function toFile(row: repo.FileRow, open: boolean): UploadRequestFile {
  return {
    id: row.id,
    name: row.name,
    content_type: row.content_type,
    size_bytes: Number(row.size_bytes),
    sha256: row.sha256,
    status: row.state === 'reserved' ? 'reserved' : 'uploaded',
    upload_url: open && row.upload_request_id ? uploadUrl(row.upload_request_id, row.id) : null,
    uploaded_at: row.uploaded_at?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

async function present(db: Executor, row: repo.UploadRequestRow, now = new Date()): Promise<UploadRequest> {
  return toUploadRequest(row, await repo.filesOf(db, row.id), now);
}

function toUploadRequest(row: repo.UploadRequestRow, staged: readonly repo.FileRow[], now: Date): UploadRequest {
  const status = statusOf(row, now);
  // Staged files of a request that ended unconfirmed are gone (or about to be: the sweeper).
  const files = status === 'open' || status === 'confirmed' ? staged : [];
  return {
    id: row.id,
    requester_user_id: row.requester_user_id,
    assignee_user_id: row.assignee_user_id,
    assignee_email: row.assignee_email,
    message: row.message,
    accepted_content_types: [...row.accepted_content_types],
    max_file_bytes: Number(row.max_file_bytes),
    max_files: row.max_files,
    status,
    files: files.map((f) => toFile(f, status === 'open')),
    expires_at: row.expires_at.toISOString(),
    confirmed_at: row.confirmed_at?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

type Role = 'requester' | 'assignee';

/**
 * The upload request as the caller may act on it: 404 unless they are its requester or
 * assignee (nobody else learns it exists), 403 unless they hold `role`, 409 unless it is
 * still open.
 */
async function acting(db: Executor, ctx: RequestContext, id: string, role: Role | null, forUpdate = false): Promise<repo.UploadRequestRow> {
  const row = await repo.findUploadRequest(db, ctx.orgId, id, forUpdate);
  if (!row || (row.requester_user_id !== ctx.user && row.assignee_user_id !== ctx.user)) throw notFound(WHAT, id);
  if (role === null) return row;
  const holder = role === 'requester' ? row.requester_user_id : row.assignee_user_id;
  if (holder !== ctx.user) {
    throw new ApiError(
      'insufficient_access',
      role === 'assignee'
        ? `Only the person upload request ${id} asks (${row.assignee_email}) may do this.`
        : `Only the member who made upload request ${id} may cancel it; as its assignee, decline it instead.`,
    );
  }
  const status = statusOf(row, new Date());
  if (status !== 'open') throw new ApiError('invalid_transition', `Upload request ${id} is ${status}, no longer open.`);
  return row;
}

/** A staged file of the request (reserved or uploaded, not yet handed over); 404 otherwise. */
async function stagedFile(db: Executor, ctx: RequestContext, request: repo.UploadRequestRow, fileId: string, forUpdate = false): Promise<repo.FileRow> {
  const file = await repo.findFile(db, ctx.orgId, fileId, forUpdate);
  if (!file || file.upload_request_id !== request.id || file.state === 'stored') {
    throw new ApiError('not_found', `No file ${fileId} staged in upload request ${request.id}.`);
  }
  return file;
}

const typeOf = (mediaType: string) => mediaType.split(';')[0]?.trim() ?? '';

function webLink(deps: AppDeps, id: string): string {
  return `${deps.config.webAppUrl ?? deps.config.baseUrl}/upload-requests/${id}`;
}

async function tell(ctx: RequestContext, to: string, subject: string, lines: string[], what: string): Promise<void> {
  try {
    await ctx.deps.mailer.send({ to: [to], subject, text: lines.join('\n') });
  } catch (err) {
    ctx.log.warn({ err: (err as Error).message }, `${what} email not sent`);
  }
}

const person = (facts: { email: string; name: string | null } | undefined) =>
  facts ? (facts.name ? `${facts.name} (${facts.email})` : facts.email) : 'A member';

export async function create(ctx: RequestContext, body: Create): Promise<UploadRequest> {
  const now = new Date();
  const limit = ctx.deps.config.files.maxFileBytes;
  const problems = [];
  if ((body.assignee_user_id === undefined) === (body.assignee_email === undefined)) {
    problems.push({ in: 'body' as const, pointer: '', message: 'name the assignee by exactly one of assignee_user_id and assignee_email' });
  }
  if (body.max_file_bytes !== undefined && body.max_file_bytes > limit) {
    problems.push({ in: 'body' as const, pointer: '/max_file_bytes', message: `is above the per-file limit of ${limit} bytes` });
  }
  const expiresAt = body.expires_at === undefined ? new Date(now.getTime() + DEFAULT_DAYS * DAY_MS) : new Date(body.expires_at);
  if (expiresAt <= now) problems.push({ in: 'body' as const, pointer: '/expires_at', message: 'is in the past' });
  else if (expiresAt.getTime() > now.getTime() + MAX_DAYS * DAY_MS)
    problems.push({ in: 'body' as const, pointer: '/expires_at', message: `is more than ${MAX_DAYS} days away` });
  if (problems.length > 0) throw validationError(problems);
  const assignee = await repo.activeMember(
    ctx.db,
    ctx.orgId,
    body.assignee_user_id !== undefined ? { userId: body.assignee_user_id } : { email: body.assignee_email as string },
  );
  if (!assignee) {
    const pointer = body.assignee_user_id !== undefined ? '/assignee_user_id' : '/assignee_email';
    throw new ApiError('unknown_reference', 'No active member of this organization matches the assignee.', {
      errors: [{ in: 'body', pointer, message: 'is not an active member of this organization' }],
    });
  }
  const row = await ctx.write(async (w) => {
    const inserted = await repo.insertUploadRequest(w.db, {
      id: newId('uploadRequest'),
      org_id: ctx.orgId,
      requester_user_id: ctx.user,
      assignee_user_id: assignee.id,
      assignee_email: assignee.email,
      message: body.message ?? null,
      accepted_content_types: [...(body.accepted_content_types ?? [])],
      max_file_bytes: body.max_file_bytes ?? limit,
      max_files: body.max_files ?? 10,
      expires_at: expiresAt,
    });
    w.audit({
      targetId: inserted.id,
      changes: {
        assignee_user_id: inserted.assignee_user_id,
        accepted_content_types: inserted.accepted_content_types,
        max_file_bytes: Number(inserted.max_file_bytes),
        max_files: inserted.max_files,
        expires_at: inserted.expires_at.toISOString(),
      },
    });
    return inserted;
  });
  const requester = await repo.userFacts(ctx.db, ctx.user);
  await tell(
    ctx,
    assignee.email,
    `${person(requester)} asks you for files`,
    [
      `${person(requester)} asks you to upload files.`,
      ...(row.message ? ['', row.message] : []),
      '',
      `Upload them here: ${webLink(ctx.deps, row.id)}`,
      '',
      `The request is open until ${row.expires_at.toISOString()}.`,
    ],
    'upload request',
  );
  return present(ctx.db, row, now);
}

export async function list(
  ctx: RequestContext,
  page: PageRequest,
  filter: { role?: 'requester' | 'assignee'; status?: UploadRequest['status'] },
): Promise<Page<UploadRequest>> {
  const now = new Date();
  const rows = await repo.listUploadRequestsOf(ctx.db, ctx.orgId, ctx.user, page, filter, now);
  const files = await repo.filesOfMany(
    ctx.db,
    rows.slice(0, page.limit).map((r) => r.id),
  );
  return toPage(rows, page, (row) => toUploadRequest(row, files.get(row.id) ?? [], now));
}

export async function get(ctx: RequestContext, id: string): Promise<UploadRequest> {
  return present(ctx.db, await acting(ctx.db, ctx, id, null));
}

export async function reserve(ctx: RequestContext, id: string, body: Reserve): Promise<UploadRequestFile> {
  const row = await ctx.write(async (w) => {
    const request = await acting(w.db, ctx, id, 'assignee', true);
    const problems = [];
    if (!validName(body.name)) problems.push({ in: 'body' as const, pointer: '/name', message: 'is not a file name (`.` and `..` are not)' });
    const accepted = request.accepted_content_types;
    if (accepted.length > 0 && !accepted.some((range) => inRange(typeOf(body.content_type), range))) {
      problems.push({ in: 'body' as const, pointer: '/content_type', message: `is not among the accepted types (${accepted.join(', ')})` });
    }
    const max = Math.min(Number(request.max_file_bytes), ctx.deps.config.files.maxFileBytes);
    if (body.size_bytes > max)
      problems.push({ in: 'body' as const, pointer: '/size_bytes', message: `is above the ${max} bytes a file of this request may have` });
    if (problems.length > 0) throw validationError(problems);
    const staged = await repo.filesOf(w.db, id);
    if (staged.length >= request.max_files) {
      throw new ApiError('upload_request_full', `Upload request ${id} holds its ${request.max_files} files already; remove one first.`);
    }
    await requireRoom(w.db, ctx.orgId, body.size_bytes);
    const inserted = await repo.insertFile(w.db, {
      id: newId('file'),
      org_id: ctx.orgId,
      owner_user_id: request.requester_user_id,
      name: body.name,
      content_type: body.content_type,
      size_bytes: body.size_bytes,
      sha256: null,
      storage_key: null,
      source: 'upload_request',
      upload_request_id: id,
      state: 'reserved',
      uploaded_at: null,
    });
    w.audit({ targetId: id, changes: { file_id: inserted.id, name: body.name, content_type: body.content_type, size_bytes: body.size_bytes } });
    return inserted;
  });
  return toFile(row, true);
}

/**
 * The bytes of a reserved file, streamed into storage under a new key while they are
 * counted, hashed and sniffed (Intake): exactly the reserved size, of a type the request
 * accepts. Recorded, with the previous version's key handed to the sweeper, only once
 * they are all stored.
 */
const digestProblem = (message: string) => validationError([{ in: 'header', pointer: '/Content-Digest', message }]);

/**
 * The SHA-256 (hex) a `Content-Digest` header (RFC 9530, a structured-field dictionary of
 * byte sequences) gives, or null when it names none; 400 for a `sha-256` that is not one.
 */
function claimedSha256(header: string | undefined): string | null {
  if (header === undefined) return null;
  const member = header
    .split(',')
    .map((m) => m.trim())
    .find((m) => /^sha-256\s*=/i.test(m));
  if (!member) return null;
  const value = /^sha-256\s*=\s*:([A-Za-z0-9+/]*={0,2}):$/i.exec(member)?.[1];
  const bytes = value === undefined ? null : Buffer.from(value, 'base64');
  if (!bytes || bytes.length !== 32) throw digestProblem('has a sha-256 member that is not 32 bytes of base64 between colons');
  return bytes.toString('hex');
}

export async function put(ctx: RequestContext, id: string, fileId: string, body: UploadStream, contentDigest?: string): Promise<UploadRequestFile> {
  const claimed = claimedSha256(contentDigest);
  const request = await acting(ctx.db, ctx, id, 'assignee');
  const file = await stagedFile(ctx.db, ctx, request, fileId);
  const size = Number(file.size_bytes);
  if (body.declaredLength !== null && body.declaredLength > size) {
    throw new ApiError('payload_too_large', `The body is ${body.declaredLength} bytes; file ${fileId} was reserved for exactly ${size}.`);
  }
  if (body.declaredLength !== null && body.declaredLength < size) {
    throw new ApiError('file_size_mismatch', `The body is ${body.declaredLength} bytes; file ${fileId} was reserved for exactly ${size}.`);
  }
  const key = fileKey(ctx.orgId, fileId);
  const stored = await storeBytes(ctx.deps, key, () => checked(body, new Intake({ exact: size, accepted: request.accepted_content_types })), size);
  let replaced: string | null = null;
  try {
    if (claimed !== null && claimed !== stored.sha256) throw digestProblem(`says sha-256 ${claimed}; the bytes received have ${stored.sha256}`);
    const row = await ctx.write(async (w) => {
      // Checked again under the lock: the request may have closed, or the file gone, while the bytes came.
      const current = await acting(w.db, ctx, id, 'assignee', true);
      const before = await stagedFile(w.db, ctx, current, fileId, true);
      replaced = before.storage_key;
      const updated = await repo.updateFile(w.db, ctx.orgId, fileId, { storage_key: key, sha256: stored.sha256, state: 'uploaded', uploaded_at: new Date() });
      await recorded(w.db, key);
      w.audit({ targetId: id, changes: { file_id: fileId, size_bytes: stored.size, sha256: { from: before.sha256, to: stored.sha256 } } });
      return updated;
    });
    if (replaced) await collect(ctx.deps, [replaced]);
    return toFile(row, true);
  } catch (err) {
    await discard(ctx.deps, [key]);
    throw err;
  }
}

export async function removeFile(ctx: RequestContext, id: string, fileId: string): Promise<void> {
  const key = await ctx.write(async (w) => {
    const request = await acting(w.db, ctx, id, 'assignee', true);
    const file = await stagedFile(w.db, ctx, request, fileId, true);
    await repo.deleteFile(w.db, ctx.orgId, fileId);
    w.audit({ targetId: id, changes: { file_id: fileId, name: file.name, size_bytes: Number(file.size_bytes) } });
    return file.storage_key;
  });
  if (key) await collect(ctx.deps, [key]);
}

export async function confirm(ctx: RequestContext, id: string): Promise<UploadRequest> {
  const now = new Date();
  const row = await ctx.write(async (w) => {
    await acting(w.db, ctx, id, 'assignee', true);
    const files = await repo.filesOf(w.db, id);
    if (files.length === 0) throw new ApiError('upload_incomplete', `Upload request ${id} has no files; reserve and send at least one.`);
    const waiting = files.filter((f) => f.state === 'reserved');
    if (waiting.length > 0) {
      throw new ApiError(
        'upload_incomplete',
        `Upload request ${id} has files whose bytes have not arrived (${waiting.map((f) => f.id).join(', ')}); send them or remove them.`,
      );
    }
    // Reservations counted already: only a plan that shrank since refuses here.
    await requireRoom(w.db, ctx.orgId, 0);
    await w.db.updateTable('tool_files').set({ state: 'stored' }).where('upload_request_id', '=', id).where('state', '=', 'uploaded').execute();
    const closed = await repo.closeUploadRequest(w.db, ctx.orgId, id, 'confirmed', now);
    w.audit({ targetId: id, changes: { status: { from: 'open', to: 'confirmed' }, file_ids: files.map((f) => f.id) } });
    return closed;
  });
  const [assignee, requester] = await Promise.all([repo.userFacts(ctx.db, row.assignee_user_id), repo.userFacts(ctx.db, row.requester_user_id)]);
  if (requester) {
    await tell(
      ctx,
      requester.email,
      `${person(assignee)} sent the files you asked for`,
      [`${person(assignee)} confirmed your upload request; the files are now yours, in your tool files.`, '', webLink(ctx.deps, row.id)],
      'upload request confirmed',
    );
  }
  return present(ctx.db, row, now);
}

/** Ends an open request unconfirmed: its staged files go, their bytes to the sweeper. */
async function end(
  w: WriteScope,
  orgId: string,
  id: string,
  status: 'cancelled' | 'declined',
  now: Date,
): Promise<{ row: repo.UploadRequestRow; keys: string[] }> {
  const staged = await repo.filesOf(w.db, id);
  await repo.deleteStagedFiles(w.db, [id]);
  const row = await repo.closeUploadRequest(w.db, orgId, id, status, now);
  return { row, keys: staged.flatMap((f) => (f.storage_key ? [f.storage_key] : [])) };
}

export async function cancel(ctx: RequestContext, id: string): Promise<UploadRequest> {
  const now = new Date();
  const { row, keys } = await ctx.write(async (w) => {
    await acting(w.db, ctx, id, 'requester', true);
    const ended = await end(w, ctx.orgId, id, 'cancelled', now);
    w.audit({ targetId: id, changes: { status: { from: 'open', to: 'cancelled' }, files_removed: ended.keys.length } });
    return ended;
  });
  await collect(ctx.deps, keys);
  return present(ctx.db, row, now);
}

export async function decline(ctx: RequestContext, id: string): Promise<UploadRequest> {
  const now = new Date();
  const { row, keys } = await ctx.write(async (w) => {
    await acting(w.db, ctx, id, 'assignee', true);
    const ended = await end(w, ctx.orgId, id, 'declined', now);
    w.audit({ targetId: id, changes: { status: { from: 'open', to: 'declined' }, files_removed: ended.keys.length } });
    return ended;
  });
  await collect(ctx.deps, keys);
  const [assignee, requester] = await Promise.all([repo.userFacts(ctx.db, row.assignee_user_id), repo.userFacts(ctx.db, row.requester_user_id)]);
  if (requester) {
    await tell(
      ctx,
      requester.email,
      `${person(assignee)} declined your request for files`,
      [`${person(assignee)} declined your upload request${row.message ? `:\n\n${row.message}` : '.'}`, '', webLink(ctx.deps, row.id)],
      'upload request declined',
    );
  }
  return present(ctx.db, row, now);
}

/**
 * A membership ended (the memberRemoved hook): the open upload requests the person made or
 * was asked in are cancelled, their staged files removed (the bytes go at the next sweep).
 */
export async function onMemberRemoved(w: WriteScope, orgId: string, userId: string): Promise<void> {
  const open = await w.db
    .updateTable('upload_requests')
    .set({ status: 'cancelled' })
    .where('org_id', '=', orgId)
    .where('status', '=', 'open')
    .where((eb) => eb.or([eb('requester_user_id', '=', userId), eb('assignee_user_id', '=', userId)]))
    .returning('id')
    .execute();
  await repo.deleteStagedFiles(
    w.db,
    open.map((r) => r.id),
  );
}
