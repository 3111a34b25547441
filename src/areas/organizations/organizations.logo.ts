import { createHash } from 'node:crypto';
import type { components } from '../../../generated/openapi';
import { loadMemberAccess } from '../../identity/credentials';
import type { RequestContext } from '../../http/context';
import { ApiError, notFound, validationError } from '../../http/errors';
import type { UploadStream } from '../../http/handler-types';
import { imageInfo } from '../../lib/image-info';
import { storageOf } from '../../lib/storage';
import { toOrganization } from './organizations.mapper';
import { findOrganization, updateOrganization } from './organizations.repo';

type Organization = components['schemas']['Organization'];

/** The most pixels a logo may have on either side. */
export const MAX_LOGO_SIDE = 2048;

const logoKey = (orgId: string, sha256: string) => `organization/${orgId}/logo/${sha256}`;

async function readAll(stream: UploadStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const badImage = (message: string) => validationError([{ in: 'body', pointer: '', message }]);

/**
 * Sets the logo: the bytes must be an image of the type they are sent as (recognised by its
 * header, not by the Content-Type alone), no larger than MAX_LOGO_SIDE on a side. Stored
 * first under a key named by its hash, then recorded with its audit entry; the previous
 * logo's bytes are removed once the new one is committed.
 */
export async function uploadLogo(ctx: RequestContext, orgId: string, body: UploadStream): Promise<Organization> {
  const bytes = await readAll(body);
  const declared = body.contentType;
  const info = imageInfo(bytes);
  if (!info) throw badImage(`is not a PNG, JPEG or WebP image (sent as ${declared})`);
  if (info.type !== declared) throw badImage(`is a ${info.type} image, sent as ${declared}`);
  if (info.width < 1 || info.height < 1 || info.width > MAX_LOGO_SIDE || info.height > MAX_LOGO_SIDE) {
    throw badImage(`is ${info.width}×${info.height} pixels; a logo may have at most ${MAX_LOGO_SIDE} on a side`);
  }
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  const key = logoKey(orgId, sha256);
  const storage = storageOf(ctx.deps.config);
  await storage.put(key, bytes);
  let previous: string | null = null;
  try {
    const updated = await ctx.write(async (w) => {
      const org = await findOrganization(w.db, orgId, true);
      if (!org) throw notFound('organization', orgId);
      previous = org.logo_key;
      const row = await updateOrganization(w.db, orgId, {
        logo_key: key,
        logo_content_type: info.type,
        logo_sha256: sha256,
        logo_bytes: bytes.length,
        logo_url: `/organization/${orgId}/logo?v=${sha256.slice(0, 12)}`,
      });
      w.audit({
        targetType: 'organization',
        targetId: orgId,
        changes: { content_type: info.type, size: bytes.length, sha256, width: info.width, height: info.height },
      });
      return row!;
    });
    if (previous && previous !== key) await storage.delete(previous).catch((err) => ctx.log.warn({ err }, 'old logo not removed from storage'));
    return toOrganization(updated);
  } catch (err) {
    if (previous !== key) await storage.delete(key).catch(() => undefined);
    throw err;
  }
}

export async function deleteLogo(ctx: RequestContext, orgId: string): Promise<void> {
  const removed = await ctx.write(async (w) => {
    const org = await findOrganization(w.db, orgId, true);
    if (!org?.logo_key) throw new ApiError('not_found', `Organization ${orgId} has no logo.`);
    await updateOrganization(w.db, orgId, { logo_key: null, logo_content_type: null, logo_sha256: null, logo_bytes: null, logo_url: null });
    w.audit({ targetType: 'organization', targetId: orgId, changes: { sha256: org.logo_sha256 } });
    return org.logo_key;
  });
  await storageOf(ctx.deps.config)
    .delete(removed)
    .catch((err) => ctx.log.warn({ err }, 'logo not removed from storage'));
}

/**
 * The logo's bytes for a member of the organization (a session's person, or a token of that
 * organization); anyone else, and an organization without a logo, is 404 alike.
 */
export async function readLogo(ctx: RequestContext, orgId: string): Promise<{ bytes: Buffer; contentType: string; sha256: string }> {
  const missing = () => new ApiError('not_found', `No logo for organization ${orgId}.`);
  const caller = ctx.authenticated;
  if (caller.kind === 'session') {
    const access = await loadMemberAccess(ctx.db, caller.userId, orgId);
    if (!access || (access.requireMfa && !caller.secondFactorAt)) throw missing();
  } else if (!('orgId' in caller) || caller.orgId !== orgId) {
    throw missing();
  }
  const org = await findOrganization(ctx.db, orgId);
  if (!org?.logo_key || !org.logo_content_type || !org.logo_sha256) throw missing();
  const bytes = await storageOf(ctx.deps.config).get(org.logo_key);
  if (!bytes) throw missing();
  return { bytes, contentType: org.logo_content_type, sha256: org.logo_sha256 };
}
