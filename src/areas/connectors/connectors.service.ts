import type { components } from '../../../generated/openapi';
import type { Executor } from '../../db/database';
import type { RequestContext } from '../../http/context';
import { ApiError, notFound } from '../../http/errors';
import type { Page } from '../../http/pagination';
import { builtIns, type CatalogEntry } from './catalog';
import { orderedDocumentation, type ConnectorContent, type StoredAuth } from './content';
import * as repo from './connectors.repo';
import { lookup, visibleTo } from './resolve';

export type Connector = components['schemas']['Connector'];
type Summary = components['schemas']['ConnectorSummary'];
type Upstream = components['schemas']['ConnectorUpstream'];
type Auth = components['schemas']['ConnectorAuth'];

export const WHAT = 'connector';

/** The caller as connector visibility needs it. */
export function viewerOf(ctx: RequestContext): repo.Viewer {
  return { userId: ctx.user, canManage: ctx.org?.permissions.has('connector:manage') ?? false };
}

function authOut(auth: StoredAuth, hasSecret: boolean): Auth {
  return auth.type === 'oauth2' ? { ...auth, has_client_secret: hasSecret } : auth;
}

/**
 * The version an upstream is at now, seen from the organization: its custom connector of that
 * slug, else the built-in one; null when neither exists (deleted).
 */
export async function upstreamVersions(db: Executor, orgId: string, slugs: readonly string[]): Promise<Map<string, number | null>> {
  const wanted = [...new Set(slugs)];
  const custom = await repo.currentVersions(db, orgId, wanted);
  const catalog = builtIns().entries;
  return new Map(wanted.map((slug) => [slug, custom.get(slug) ?? catalog.get(slug)?.version ?? null]));
}

function upstreamOut(row: repo.ConnectorRow, current: number | null | undefined): Upstream | null {
  if (row.upstream_slug === null || row.upstream_version === null || row.linked_at === null) return null;
  const now = current ?? null;
  return {
    slug: row.upstream_slug,
    version: row.upstream_version,
    current_version: now,
    updates_available: now !== null && now > row.upstream_version,
    linked_at: row.linked_at.toISOString(),
  };
}

function contentOut(content: ConnectorContent, hasSecret: boolean) {
  return {
    name: content.name,
    description: content.description,
    icon_url: content.icon_url,
    mcp_url: content.mcp_url,
    transport: content.transport,
    auth: authOut(content.auth, hasSecret),
    tools: content.tools,
    documentation: orderedDocumentation(content.documentation),
  };
}

export function customConnector(row: repo.ConnectorRow, upstreamCurrent: number | null | undefined): Connector {
  return {
    slug: row.slug,
    ...contentOut(row.content, row.client_secret_enc !== null),
    source: 'custom',
    version: row.version,
    upstream: upstreamOut(row, upstreamCurrent),
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

export function builtInConnector(entry: CatalogEntry): Connector {
  return {
    slug: entry.slug,
    ...contentOut(entry.content, false),
    source: 'built_in',
    version: entry.version,
    upstream: null,
    created_by_user_id: null,
    created_at: entry.createdAt.toISOString(),
    updated_at: entry.updatedAt.toISOString(),
  };
}

/** A custom connector as answered, with its upstream's current version looked up. */
export async function present(db: Executor, orgId: string, row: repo.ConnectorRow): Promise<Connector> {
  const current = row.upstream_slug ? (await upstreamVersions(db, orgId, [row.upstream_slug])).get(row.upstream_slug) : null;
  return customConnector(row, current);
}

function summaryOf(connector: Omit<Connector, 'mcp_url' | 'tools' | 'documentation' | 'created_by_user_id'> & { tools: unknown[] }): Summary {
  return {
    slug: connector.slug,
    name: connector.name,
    description: connector.description,
    icon_url: connector.icon_url,
    source: connector.source,
    transport: connector.transport,
    auth_type: connector.auth.type,
    tool_count: connector.tools.length,
    version: connector.version,
    upstream: connector.upstream,
    created_at: connector.created_at,
    updated_at: connector.updated_at,
  };
}

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;

/** Connector lists are by slug: the cursor is the last slug of the previous page, opaque to clients. */
function afterSlug(cursor: string | undefined): string | undefined {
  if (cursor === undefined) return undefined;
  const slug = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!SLUG.test(slug)) throw new ApiError('invalid_cursor', 'The cursor does not belong to this list; start again without it.');
  return slug;
}

export interface ListFilter {
  source?: 'built_in' | 'custom';
  q?: string;
  auth_type?: 'none' | 'api_key' | 'oauth2';
}

function matches(entry: CatalogEntry, filter: ListFilter): boolean {
  if (filter.auth_type !== undefined && entry.content.auth.type !== filter.auth_type) return false;
  if (filter.q === undefined) return true;
  const q = filter.q.toLowerCase();
  return [entry.slug, entry.content.name, entry.content.description ?? ''].some((text) => text.toLowerCase().includes(q));
}

/** Built-in connectors and the custom ones the caller sees, merged by slug, a page at a time. */
export async function list(ctx: RequestContext, query: { limit?: number; cursor?: string } & ListFilter): Promise<Page<Summary>> {
  const limit = query.limit ?? 50;
  const after = afterSlug(query.cursor);
  const filter = { q: query.q, authType: query.auth_type };
  const custom = query.source === 'built_in' ? [] : await repo.listConnectors(ctx.db, ctx.orgId, viewerOf(ctx), { after, limit: limit + 1 }, filter);
  let builtIn: CatalogEntry[] = [];
  if (query.source !== 'custom') {
    const candidates = [...builtIns().entries.values()].filter((e) => (after === undefined || e.slug > after) && matches(e, query));
    // A custom connector of the same slug hides the built-in one in this organization.
    const hidden = await repo.customSlugsAmong(
      ctx.db,
      ctx.orgId,
      candidates.map((e) => e.slug),
    );
    builtIn = candidates.filter((e) => !hidden.has(e.slug)).slice(0, limit + 1);
  }
  const currents = await upstreamVersions(
    ctx.db,
    ctx.orgId,
    custom.flatMap((r) => (r.upstream_slug ? [r.upstream_slug] : [])),
  );
  const merged = [
    ...custom.map((row) => customConnector(row, row.upstream_slug ? currents.get(row.upstream_slug) : null)),
    ...builtIn.map(builtInConnector),
  ].sort((a, b) => (a.slug < b.slug ? -1 : 1));
  const more = merged.length > limit;
  const page = merged.slice(0, limit);
  const last = page[page.length - 1];
  return { data: page.map(summaryOf), next_cursor: more && last ? Buffer.from(last.slug, 'utf8').toString('base64url') : null };
}

/**
 * The connector a slug names as the caller sees it; 404 for nothing, or a custom connector
 * the caller cannot see (never revealing that it exists).
 */
export async function visible(ctx: RequestContext, slug: string) {
  const found = await lookup(ctx.db, ctx.orgId, slug);
  if (!found) throw notFound(WHAT, slug);
  if (found.source === 'custom') {
    const viewer = viewerOf(ctx);
    if (!(await visibleTo(ctx.db, ctx.orgId, viewer.userId, viewer.canManage, slug))) throw notFound(WHAT, slug);
  }
  return found;
}

export async function get(ctx: RequestContext, slug: string): Promise<Connector> {
  const found = await visible(ctx, slug);
  if (found.source === 'custom') return present(ctx.db, ctx.orgId, found.row);
  return builtInConnector(builtIns().entries.get(slug) as CatalogEntry);
}
