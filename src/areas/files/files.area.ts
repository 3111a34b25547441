import type { AppDeps } from '../../http/context';
import { defineArea } from '../../http/area';
import { pageRequest } from '../../http/pagination';
import { sweep } from './files.bytes';
import * as files from './files.service';
import * as uploadRequests from './upload-requests.service';

/** The process's sweeper timer (one per app): expiry, stale reservations, unreferenced bytes. */
const sweepers = new WeakMap<AppDeps, NodeJS.Timeout>();

export default defineArea({
  tag: 'Files',
  // The per-file limit is a setting (FILE_MAX_BYTES), not a number in the spec.
  bodyLimit: (operationId, deps) => (operationId === 'uploadFile' || operationId === 'putUploadRequestFile' ? deps.config.files.maxFileBytes : null),
  hooks: { memberRemoved: uploadRequests.onMemberRemoved },
  async start(deps) {
    const every = deps.config.files.sweepIntervalMs;
    if (every === 0) return;
    const timer = setInterval(() => {
      sweep(deps).catch((err) => deps.logger.warn({ err }, 'file sweep failed; the next one tries again'));
    }, every);
    timer.unref();
    sweepers.set(deps, timer);
  },
  async stop(deps) {
    clearInterval(sweepers.get(deps));
    sweepers.delete(deps);
  },
  handlers: {
    async listFiles({ query }, ctx) {
      const page = pageRequest(query, 'file');
      return {
        status: 200,
        body: await files.list(ctx, page, { source: query.source, owner_user_id: query.owner_user_id, upload_request_id: query.upload_request_id }),
      };
    },
    async uploadFile({ body }, ctx) {
      const created = await files.upload(ctx, body);
      return { status: 201, body: created, headers: { Location: `/file/${created.id}` } };
    },
    async getFile({ params }, ctx) {
      return { status: 200, body: await files.get(ctx, params.id) };
    },
    async deleteFile({ params }, ctx) {
      await files.remove(ctx, params.id);
      return { status: 204 };
    },
    async downloadFile({ params }, ctx) {
      const { row, stream } = await files.download(ctx, params.id);
      return {
        status: 200,
        body: stream,
        contentType: row.content_type,
        contentLength: Number(row.size_bytes),
        headers: {
          'Content-Disposition': files.contentDisposition(row.name),
          ETag: `"${row.sha256}"`,
          'Accept-Ranges': 'none',
          'X-Content-Type-Options': 'nosniff',
          'Cache-Control': 'private, no-cache',
          'Content-Security-Policy': "sandbox; default-src 'none'",
        },
      };
    },
    async listFileShares({ params, query }, ctx) {
      return { status: 200, body: await files.listFileShares(ctx, params.id, pageRequest(query, 'share')) };
    },
    async shareFile({ params, body }, ctx) {
      const { share, created } = await files.share(ctx, params.id, body);
      return created ? { status: 201, body: share, headers: { Location: `/file/${params.id}/share/${share.id}` } } : { status: 200, body: share };
    },
    async revokeFileShare({ params }, ctx) {
      await files.revokeFileShare(ctx, params.id, params.aclId);
      return { status: 204 };
    },
    async listUploadRequests({ query }, ctx) {
      const page = pageRequest(query, 'uploadRequest');
      return { status: 200, body: await uploadRequests.list(ctx, page, { role: query.role, status: query.status }) };
    },
    async createUploadRequest({ body }, ctx) {
      const created = await uploadRequests.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/file/upload-request/${created.id}` } };
    },
    async getUploadRequest({ params }, ctx) {
      return { status: 200, body: await uploadRequests.get(ctx, params.id) };
    },
    async reserveUploadRequestFile({ params, body }, ctx) {
      const file = await uploadRequests.reserve(ctx, params.id, body);
      return { status: 201, body: file, headers: { Location: file.upload_url as string } };
    },
    async putUploadRequestFile({ params, headers, body }, ctx) {
      return { status: 200, body: await uploadRequests.put(ctx, params.id, params.file_id, body, headers['Content-Digest']) };
    },
    async deleteUploadRequestFile({ params }, ctx) {
      await uploadRequests.removeFile(ctx, params.id, params.file_id);
      return { status: 204 };
    },
    async confirmUploadRequest({ params }, ctx) {
      return { status: 200, body: await uploadRequests.confirm(ctx, params.id) };
    },
    async cancelUploadRequest({ params }, ctx) {
      return { status: 200, body: await uploadRequests.cancel(ctx, params.id) };
    },
    async declineUploadRequest({ params }, ctx) {
      return { status: 200, body: await uploadRequests.decline(ctx, params.id) };
    },
  },
});
