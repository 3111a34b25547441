import type { components } from '../../../generated/openapi';
import { requireFeature, requireWithinLimit } from '../../access/entitlements';
import { deleteSharesOf, listShares, revokeShare, shareResource, type Share } from '../../access/shares';
import { changedMembers, SECRET_CHANGED, type RequestContext, type WriteScope } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError } from '../../http/errors';
import type { Page } from '../../http/pagination';
import { builtIns, catalogVersionContent } from './catalog';
import {
  docValue,
  MEMBERS,
  orderedDocumentation,
  originOf,
  sameContent,
  sameJson,
  storedAuth,
  storedDocumentation,
  storedTool,
  type ConnectorContent,
} from './content';
import { ConnectorRow, countConnectors, deleteConnector, insertConnector, insertVersion, lineage, updateConnector, versionContent } from './connectors.repo';
import { present, visible, WHAT, type Connector } from './connectors.service';
import { diffUpstream, takeFields, type FieldChange } from './pull';
import { clientSecretContext, lookup } from './resolve';
import { assertContent } from './rules';

type Create = components['schemas']['ConnectorCreate'];
type Update = components['schemas']['ConnectorUpdate'];
type Fork = components['schemas']['ConnectorFork'];
type PullPreview = components['schemas']['ConnectorPullPreview'];
type PullApply = components['schemas']['ConnectorPullApply'];
type Link = components['schemas']['ConnectorUpstreamLink'];
type DocumentationUpsert = components['schemas']['ConnectorDocumentationUpsert'];
type ShareCreate = components['schemas']['ShareCreate'];

const MAX_DOCUMENTATION = 200;
const PKEY = 'connectors_pkey';

const readOnly = (slug: string) =>
  new ApiError(
    'built_in_connector_read_only',
    `${slug} is a built-in connector and cannot be changed, deleted, shared or given lineage; fork it (POST /connector/${slug}/fork) instead.`,
  );
const slugTaken = (slug: string) => new ApiError('slug_taken', `The organization already sees a connector with the slug ${slug}; choose another.`);

/** Two creates of one slug: the primary key's violation becomes 409 slug_taken. */
const guardSlug = <T>(slug: string, run: () => Promise<T>): Promise<T> => conflictOnUnique(PKEY, () => slugTaken(slug), run);

/** The organization's own connector, locked for the change; 409 for a built-in slug, 404 for nothing. */
async function ownForUpdate(w: WriteScope, ctx: RequestContext, slug: string): Promise<ConnectorRow> {
  const found = await lookup(w.db, ctx.orgId, slug, true);
  if (!found) throw notFound(WHAT, slug);
  if (found.source === 'built_in') throw readOnly(slug);
  return found.row;
}

const eventConnector = (row: { slug: string; version: number; content: ConnectorContent }) => ({
  slug: row.slug,
  name: row.content.name,
  version: String(row.version),
});

/** Whether connections to the connector must start over: they would reach another server or client. */
function identityChanged(before: ConnectorContent, after: ConnectorContent): boolean {
  if (originOf(before.mcp_url) !== originOf(after.mcp_url)) return true;
  if (before.auth.type !== after.auth.type) return true;
  if (before.auth.type === 'oauth2' && after.auth.type === 'oauth2') {
    return (
      before.auth.client_id !== after.auth.client_id ||
      before.auth.token_url !== after.auth.token_url ||
      before.auth.revocation_url !== after.auth.revocation_url
    );
  }
  return false;
}

/**
 * Whether a stored client secret may stay with the new content: the same OAuth client at the
 * same provider. Without a token_url the provider is discovered from the MCP server, so the
 * origin of `mcp_url` must stay too: the secret is never sent to another server than the one
 * it was given for.
 */
function secretMayStay(before: ConnectorContent, after: ConnectorContent): boolean {
  const [a, b] = [before.auth, after.auth];
  return (
    a.type === 'oauth2' &&
    b.type === 'oauth2' &&
    a.client_id === b.client_id &&
    a.token_url === b.token_url &&
    a.revocation_url === b.revocation_url &&
    (b.token_url !== null || originOf(before.mcp_url) === originOf(after.mcp_url))
  );
}

/** The members, `tools` and `documentation` whose value differs. */
function changedFields(before: ConnectorContent, after: ConnectorContent): string[] {
  const changed: string[] = MEMBERS.filter((m) => !sameJson(before[m], after[m]));
  if (!sameJson(before.tools, after.tools)) changed.push('tools');
  if (!sameJson(orderedDocumentation(before.documentation).map(docValue), orderedDocumentation(after.documentation).map(docValue)))
    changed.push('documentation');
  return changed;
}

/** The members an update may change, as its audit entry compares them: the secret only as changed or not, the tool list by digest. */
function auditedMembers(row: ConnectorRow): Record<string, unknown> {
  const { name, description, icon_url, mcp_url, transport, auth, tools } = row.content;
  return { name, description, icon_url, mcp_url, transport, auth, tools, client_secret: row.client_secret_enc, version: row.version };
}

async function requireRoomForOne(ctx: RequestContext, w: WriteScope): Promise<void> {
  await requireFeature(w.db, ctx.orgId, 'custom_connectors');
  await requireWithinLimit(w.db, ctx.orgId, 'custom_connectors', () => countConnectors(w.db, ctx.orgId));
}

export async function create(ctx: RequestContext, body: Create): Promise<Connector> {
  const now = new Date().toISOString();
  const content: ConnectorContent = {
    name: body.name,
    description: body.description ?? null,
    icon_url: body.icon_url ?? null,
    mcp_url: body.mcp_url,
    transport: body.transport ?? 'streamable_http',
    auth: storedAuth(body.auth),
    tools: (body.tools ?? []).map(storedTool),
    documentation: (body.documentation ?? []).map((entry) => storedDocumentation(entry, now)),
  };
  const secret = body.auth.type === 'oauth2' ? (body.auth.client_secret ?? null) : null;
  assertContent(content, ctx.deps.config.outbound, { clientSecret: secret !== null });
  if (builtIns().entries.has(body.slug)) throw slugTaken(body.slug);
  return guardSlug(body.slug, () =>
    ctx.write(async (w) => {
      await requireRoomForOne(ctx, w);
      const row = await insertConnector(w.db, {
        org_id: ctx.orgId,
        slug: body.slug,
        content,
        client_secret_enc: secret === null ? null : ctx.deps.secrets.seal(secret, clientSecretContext(ctx.orgId, body.slug)),
        upstream_slug: null,
        upstream_version: null,
        linked_at: null,
        created_by_user_id: ctx.user,
      });
      await insertVersion(w.db, ctx.orgId, body.slug, 1, content);
      w.audit({
        targetId: body.slug,
        changes: {
          name: content.name,
          mcp_url: content.mcp_url,
          transport: content.transport,
          auth_type: content.auth.type,
          client_secret: secret === null ? null : SECRET_CHANGED,
          tools: content.tools.map((t) => t.name),
          documentation: content.documentation.map((d) => d.key),
        },
      });
      w.emit('connector.created', { connector: eventConnector(row), forked_from: null });
      return present(w.db, ctx.orgId, row);
    }),
  );
}

/**
 * Writes a new content (and secret) as the next version when anything changed; disconnects
 * connections when the upstream's identity changed. Returns the row and the changed fields.
 */
async function writeVersion(
  ctx: RequestContext,
  w: WriteScope,
  row: ConnectorRow,
  content: ConnectorContent,
  secretEnc: string | null,
  extra: { upstream_version?: number; linked_at?: Date } = {},
): Promise<{ row: ConnectorRow; changed: string[] }> {
  const changed = changedFields(row.content, content);
  if (secretEnc !== row.client_secret_enc && !changed.includes('auth')) changed.push('auth');
  if (changed.length === 0) {
    if (Object.keys(extra).length === 0) return { row, changed };
    return { row: await updateConnector(w.db, ctx.orgId, row.slug, extra), changed };
  }
  const version = row.version + 1;
  const updated = await updateConnector(w.db, ctx.orgId, row.slug, { content, client_secret_enc: secretEnc, version, ...extra });
  await insertVersion(w.db, ctx.orgId, row.slug, version, content);
  if (identityChanged(row.content, content)) await ctx.deps.hooks.run('connectorChanged', w, ctx.orgId, row.slug);
  return { row: updated, changed };
}

export async function update(ctx: RequestContext, slug: string, body: Update): Promise<Connector> {
  const newSecret = body.auth?.type === 'oauth2' ? (body.auth.client_secret ?? null) : null;
  return ctx.write(async (w) => {
    const row = await ownForUpdate(w, ctx, slug);
    const content: ConnectorContent = {
      ...row.content,
      ...(body.name !== undefined ? { name: body.name } : {}),
      ...(body.description !== undefined ? { description: body.description } : {}),
      ...(body.icon_url !== undefined ? { icon_url: body.icon_url } : {}),
      ...(body.mcp_url !== undefined ? { mcp_url: body.mcp_url } : {}),
      ...(body.transport !== undefined ? { transport: body.transport } : {}),
      ...(body.auth !== undefined ? { auth: storedAuth(body.auth) } : {}),
      ...(body.tools !== undefined ? { tools: body.tools.map(storedTool) } : {}),
    };
    assertContent(content, ctx.deps.config.outbound, { clientSecret: newSecret !== null });
    // Credentials only ever go where they were given for.
    let secretEnc = row.client_secret_enc;
    if (newSecret !== null) {
      const context = clientSecretContext(ctx.orgId, slug);
      const same = row.client_secret_enc !== null && secretMayStay(row.content, content) && ctx.deps.secrets.open(row.client_secret_enc, context) === newSecret;
      if (!same) secretEnc = ctx.deps.secrets.seal(newSecret, context);
    } else if (!secretMayStay(row.content, content)) {
      secretEnc = null;
    }
    const { row: updated, changed } = await writeVersion(ctx, w, row, content, secretEnc);
    w.audit({ targetId: slug, changes: changedMembers(auditedMembers(row), auditedMembers(updated), { secrets: ['client_secret'], digests: ['tools'] }) });
    if (changed.length > 0) w.emit('connector.updated', { connector: eventConnector(updated), changed });
    return present(w.db, ctx.orgId, updated);
  });
}

export async function remove(ctx: RequestContext, slug: string): Promise<void> {
  await ctx.write(async (w) => {
    const row = await ownForUpdate(w, ctx, slug);
    const usages = await ctx.deps.hooks.usages('connectorUsage', w.db, ctx.orgId, slug);
    if (usages.length > 0) {
      throw new ApiError('connector_in_use', `${slug} is still used by ${usages.join(' and ')}; delete or move them first.`);
    }
    await deleteSharesOf(w.db, ctx.orgId, 'connector', slug);
    await deleteConnector(w.db, ctx.orgId, slug);
    w.audit({ targetId: slug, changes: { name: row.content.name, version: row.version } });
    w.emit('connector.deleted', { connector: eventConnector(row) });
  });
}

export async function fork(ctx: RequestContext, slug: string, body: Fork): Promise<Connector> {
  const source = await visible(ctx, slug);
  if (builtIns().entries.has(body.slug)) throw slugTaken(body.slug);
  const now = new Date();
  const base = source.source === 'custom' ? source.row.content : source.content;
  const version = source.source === 'custom' ? source.row.version : source.version;
  const content: ConnectorContent = {
    ...structuredClone(base),
    name: body.name ?? base.name,
    documentation: base.documentation.map((d) => ({ ...d, updated_at: now.toISOString() })),
  };
  // The stored secret comes along, re-sealed for the fork, never shown.
  const sealed = source.source === 'custom' ? source.row.client_secret_enc : null;
  const secretEnc =
    sealed === null
      ? null
      : ctx.deps.secrets.seal(ctx.deps.secrets.open(sealed, clientSecretContext(ctx.orgId, slug)), clientSecretContext(ctx.orgId, body.slug));
  return guardSlug(body.slug, () =>
    ctx.write(async (w) => {
      await requireRoomForOne(ctx, w);
      const row = await insertConnector(w.db, {
        org_id: ctx.orgId,
        slug: body.slug,
        content,
        client_secret_enc: secretEnc,
        upstream_slug: slug,
        upstream_version: version,
        linked_at: now,
        created_by_user_id: ctx.user,
      });
      await insertVersion(w.db, ctx.orgId, body.slug, 1, content);
      w.audit({ targetId: body.slug, changes: { forked_from: slug, upstream_version: version, name: content.name } });
      w.emit('connector.created', { connector: eventConnector(row), forked_from: slug });
      return present(w.db, ctx.orgId, row);
    }),
  );
}

/** A fork's upstream as it is now and the base it started from. */
async function pullState(ctx: RequestContext, db: WriteScope['db'] | RequestContext['db'], row: ConnectorRow) {
  if (row.upstream_slug === null || row.upstream_version === null) {
    throw new ApiError(
      'connector_not_forked',
      `${row.slug} has no upstream lineage, so there is nothing to pull; link one with POST /connector/${row.slug}/link-upstream.`,
    );
  }
  const upstream = await lookup(db, ctx.orgId, row.upstream_slug);
  if (!upstream) {
    throw new ApiError(
      'upstream_connector_missing',
      `The upstream connector ${row.upstream_slug} of ${row.slug} was deleted or is no longer visible to the organization.`,
    );
  }
  const current =
    upstream.source === 'custom'
      ? { content: upstream.row.content, version: upstream.row.version, secretEnc: upstream.row.client_secret_enc }
      : { content: upstream.content, version: upstream.version, secretEnc: null };
  const base =
    upstream.source === 'custom'
      ? await versionContent(db, ctx.orgId, row.upstream_slug, row.upstream_version)
      : await catalogVersionContent(db, row.upstream_slug, row.upstream_version);
  return { upstreamSlug: row.upstream_slug, baseVersion: row.upstream_version, current, changes: diffUpstream(base, current.content, row.content) };
}

export async function previewPull(ctx: RequestContext, slug: string): Promise<PullPreview> {
  const found = await visible(ctx, slug);
  if (found.source === 'built_in') throw new ApiError('connector_not_forked', `${slug} is a built-in connector; it has no upstream to pull from.`);
  // The preview shows the upstream's content: only to someone who may see that connector.
  const upstreamSlug = found.row.upstream_slug;
  if (upstreamSlug !== null) {
    await visible(ctx, upstreamSlug).catch((err: unknown) => {
      if (err instanceof ApiError && err.code === 'not_found') {
        throw new ApiError('upstream_connector_missing', `The upstream connector ${upstreamSlug} of ${slug} was deleted or is not visible to you.`);
      }
      throw err;
    });
  }
  const state = await pullState(ctx, ctx.db, found.row);
  return { slug, upstream_slug: state.upstreamSlug, base_version: state.baseVersion, upstream_version: state.current.version, changes: state.changes };
}

export async function applyPull(ctx: RequestContext, slug: string, body: PullApply): Promise<Connector> {
  return ctx.write(async (w) => {
    const found = await lookup(w.db, ctx.orgId, slug, true);
    if (!found) throw notFound(WHAT, slug);
    if (found.source === 'built_in') throw new ApiError('connector_not_forked', `${slug} is a built-in connector; it has no upstream to pull from.`);
    const row = found.row;
    const state = await pullState(ctx, w.db, row);
    if (state.current.version !== body.upstream_version) {
      throw new ApiError(
        'upstream_changed',
        `${state.upstreamSlug} is at version ${state.current.version} now, not ${body.upstream_version}; preview the pull again.`,
      );
    }
    const offered = new Set(state.changes.map((c: FieldChange) => c.field));
    const unknown = body.fields.map((field, i) => ({ field, i })).filter(({ field }) => !offered.has(field));
    if (unknown.length > 0) {
      throw validationError(
        unknown.map(({ field, i }) => ({ in: 'body' as const, pointer: `/fields/${i}`, message: `${field} is not among the upstream's changes` })),
      );
    }
    const now = new Date();
    const content = takeFields(row.content, state.current.content, body.fields, now.toISOString());
    assertContent(content, ctx.deps.config.outbound);
    // Each side may be at the cap on its own; taken together, their entries may pass it.
    if (content.documentation.length > MAX_DOCUMENTATION) {
      throw validationError([
        {
          in: 'body',
          pointer: '/fields',
          message: `would leave ${content.documentation.length} documentation entries; a connector holds at most ${MAX_DOCUMENTATION} (remove some with PUT …/documentation first)`,
        },
      ]);
    }
    // Taking `auth` takes the upstream's client secret with it.
    let secretEnc = row.client_secret_enc;
    if (body.fields.includes('auth')) {
      const upstreamSecret = state.current.secretEnc;
      secretEnc =
        upstreamSecret === null
          ? null
          : ctx.deps.secrets.seal(
              ctx.deps.secrets.open(upstreamSecret, clientSecretContext(ctx.orgId, state.upstreamSlug)),
              clientSecretContext(ctx.orgId, slug),
            );
    } else if (!secretMayStay(row.content, content)) {
      secretEnc = null;
    }
    const { row: updated, changed } = await writeVersion(ctx, w, row, content, secretEnc, { upstream_version: body.upstream_version, linked_at: now });
    w.audit({
      targetId: slug,
      changes: { fields: body.fields, upstream_slug: state.upstreamSlug, upstream_version: body.upstream_version, version: updated.version },
    });
    w.emit('connector.updated', { connector: eventConnector(updated), changed: [...changed, 'upstream'] });
    return present(w.db, ctx.orgId, updated);
  });
}

export async function linkUpstream(ctx: RequestContext, slug: string, body: Link): Promise<Connector> {
  return ctx.write(async (w) => {
    const row = await ownForUpdate(w, ctx, slug);
    const invalid = (pointer: string, message: string) => validationError([{ in: 'body', pointer, message }]);
    if (body.upstream_slug === slug) throw invalid('/upstream_slug', 'must name another connector than this one');
    const upstream = await lookup(w.db, ctx.orgId, body.upstream_slug);
    if (!upstream) {
      throw new ApiError('unknown_reference', `No connector ${body.upstream_slug} in this organization.`, {
        errors: [{ in: 'body', pointer: '/upstream_slug', message: 'names no connector the caller sees' }],
      });
    }
    if (upstream.source === 'custom') {
      const upstreams = await lineage(w.db, ctx.orgId);
      const seen = new Set<string>();
      for (let at: string | null | undefined = body.upstream_slug; at; at = upstreams.get(at)) {
        if (at === slug) throw invalid('/upstream_slug', `would make a cycle: ${body.upstream_slug} already descends from ${slug}`);
        if (seen.has(at)) break;
        seen.add(at);
      }
    }
    const current = upstream.source === 'custom' ? upstream.row.version : upstream.version;
    const version = body.upstream_version ?? current;
    const known =
      version === current ||
      (version < current &&
        (upstream.source === 'custom'
          ? (await versionContent(w.db, ctx.orgId, body.upstream_slug, version)) !== null
          : (await catalogVersionContent(w.db, body.upstream_slug, version)) !== null));
    if (!known) throw invalid('/upstream_version', `${body.upstream_slug} never had version ${version} here`);
    const updated = await updateConnector(w.db, ctx.orgId, slug, { upstream_slug: body.upstream_slug, upstream_version: version, linked_at: new Date() });
    w.audit({
      targetId: slug,
      changes: {
        upstream_slug: body.upstream_slug,
        upstream_version: version,
        previous: row.upstream_slug === null ? null : { slug: row.upstream_slug, version: row.upstream_version },
      },
    });
    w.emit('connector.updated', { connector: eventConnector(updated), changed: ['upstream'] });
    return present(w.db, ctx.orgId, updated);
  });
}

export async function upsertDocumentation(ctx: RequestContext, slug: string, body: DocumentationUpsert): Promise<Connector> {
  const seen = new Map<string, number>();
  const duplicates = body.entries.flatMap((entry, i) => {
    if (seen.has(entry.key)) return [{ in: 'body' as const, pointer: `/entries/${i}/key`, message: `repeats the key ${entry.key}` }];
    seen.set(entry.key, i);
    return [];
  });
  if (duplicates.length > 0) throw validationError(duplicates);
  return ctx.write(async (w) => {
    const row = await ownForUpdate(w, ctx, slug);
    const now = new Date().toISOString();
    const existing = new Map(row.content.documentation.map((d) => [d.key, d]));
    const created: string[] = [];
    const replaced: string[] = [];
    const next = new Map(body.delete_missing ? [] : existing);
    for (const input of body.entries) {
      const entry = storedDocumentation(input, now);
      const before = existing.get(input.key);
      if (before && sameJson(docValue(before), docValue(entry))) {
        next.set(input.key, before);
        continue;
      }
      (before ? replaced : created).push(input.key);
      next.set(input.key, entry);
    }
    const deleted = [...existing.keys()].filter((key) => !next.has(key));
    if (next.size > MAX_DOCUMENTATION) {
      throw validationError([{ in: 'body', pointer: '/entries', message: `would leave ${next.size} entries; a connector holds at most ${MAX_DOCUMENTATION}` }]);
    }
    const content: ConnectorContent = { ...row.content, documentation: orderedDocumentation([...next.values()]) };
    const { row: updated, changed } = sameContent(row.content, content)
      ? { row, changed: [] as string[] }
      : await writeVersion(ctx, w, row, content, row.client_secret_enc);
    w.audit({ targetId: slug, changes: { created, replaced, deleted, version: updated.version } });
    if (changed.length > 0) w.emit('connector.updated', { connector: eventConnector(updated), changed });
    return present(w.db, ctx.orgId, updated);
  });
}

export async function listConnectorShares(ctx: RequestContext, slug: string, page: { limit: number; after: string | undefined }): Promise<Page<Share>> {
  const found = await visible(ctx, slug);
  if (found.source === 'built_in') return { data: [], next_cursor: null };
  return listShares(ctx.db, ctx.orgId, 'connector', slug, page);
}

export async function share(ctx: RequestContext, slug: string, body: ShareCreate): Promise<{ share: Share; created: boolean }> {
  return ctx.write(async (w) => {
    await ownForUpdate(w, ctx, slug);
    const result = await shareResource(w.db, { orgId: ctx.orgId, resourceType: 'connector', resourceId: slug, share: body, byUserId: ctx.user });
    w.audit({ targetId: slug, changes: { share_id: result.share.id, principal: body.principal, level: body.level, created: result.created } });
    return result;
  });
}

export async function revokeConnectorShare(ctx: RequestContext, slug: string, shareId: string): Promise<void> {
  await ctx.write(async (w) => {
    const found = await lookup(w.db, ctx.orgId, slug, true);
    if (!found || found.source === 'built_in') throw notFound(WHAT, slug);
    const revoked = await revokeShare(w.db, ctx.orgId, 'connector', slug, shareId);
    if (!revoked) throw new ApiError('not_found', `No share ${shareId} of connector ${slug} in this organization.`);
    await ctx.deps.hooks.run('connectorAccessChanged', w, ctx.orgId, slug);
    w.audit({ targetId: slug, changes: { share_id: shareId, principal: { type: revoked.principal_type, id: revoked.principal_id }, level: revoked.level } });
  });
}
