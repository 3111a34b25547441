import type { components } from '../../../generated/openapi';
import { loadMemberAccess } from '../../identity/credentials';
import { requireWithinLimit } from '../../access/entitlements';
import { SECRET_CHANGED, type RequestContext } from '../../http/context';
import { ApiError, notFound, validationError, type ValidationProblem } from '../../http/errors';
import { pageOfSorted, toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { listUpstreamTools, UpstreamUnavailable } from '../../mcp/upstream/client';
import { resolveConnector, type ResolvedConnector } from '../connectors';
import * as repo from './connections.repo';
import { authorizeUrlOf, revokeTokens, startAuthorization, type StartedAuthorization } from './connections.oauth';
import {
  eventConnection,
  markNeedsReauth,
  mayGoTo,
  needsReauthError,
  openCredentials,
  openOAuthClient,
  sealCredentials,
  toTool,
  tryCredentials,
  unavailable,
  upstreamLimits,
  withConnection,
  type ConnectionTool,
  type StoredCredentials,
} from '../../mcp/upstream/credentials';

type Connection = components['schemas']['Connection'];
type Create = components['schemas']['ConnectionCreate'];
type Update = components['schemas']['ConnectionUpdate'];
type Reconnect = components['schemas']['ConnectionReconnect'];
type Transfer = components['schemas']['ConnectionTransfer'];

const WHAT = 'connection';

// ---------------------------------------------------------------------------------------
// Who sees what
// ---------------------------------------------------------------------------------------

const canManage = (ctx: RequestContext) => ctx.org?.permissions.has('connection:manage') ?? false;
const seesAllConnectors = (ctx: RequestContext) => ctx.org?.permissions.has('connector:manage') ?? false;

/** The connector as the caller sees it, or null. */
const connectorFor = (ctx: RequestContext, slug: string, userId = ctx.user, manage = seesAllConnectors(ctx)) =>
  resolveConnector(ctx.db, ctx.deps.secrets, ctx.orgId, userId, manage, slug);

export function toConnection(ctx: RequestContext, row: repo.ConnectionRow): Connection {
  const ownerReads = ctx.caller?.userId === row.owner_user_id;
  const authorizeUrl = ownerReads ? authorizeUrlOf(ctx, row) : null;
  return {
    id: row.id,
    connector_slug: row.connector_slug,
    name: row.name,
    owner_user_id: row.owner_user_id,
    status: row.status,
    status_reason: row.status_reason,
    status_changed_at: row.status_changed_at.toISOString(),
    auth_type: row.auth_type,
    has_credentials: row.credentials_enc !== null,
    scopes: row.scopes,
    authorize_url: authorizeUrl,
    authorize_expires_at: authorizeUrl ? (row.authorize_expires_at?.toISOString() ?? null) : null,
    last_used_at: row.last_used_at?.toISOString() ?? null,
    last_error: row.last_error,
    transferred_from_user_id: row.transferred_from_user_id,
    transferred_at: row.transferred_at?.toISOString() ?? null,
    awaiting_acceptance: row.awaiting_acceptance,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** A connection the caller may see: their own, or anyone's with `connection:manage`; 404 otherwise. */
async function visible(ctx: RequestContext, id: string, forUpdate = false, db = ctx.db): Promise<repo.ConnectionRow> {
  const row = await repo.findConnection(db, ctx.orgId, id, forUpdate);
  if (!row || (row.owner_user_id !== ctx.user && !canManage(ctx))) throw notFound(WHAT, id);
  return row;
}

/** A connection whose credentials the caller uses: only its owner (403 for a manager who sees it, 404 for others). */
async function owned(ctx: RequestContext, id: string): Promise<repo.ConnectionRow> {
  const row = await visible(ctx, id);
  if (row.owner_user_id !== ctx.user) {
    throw new ApiError(
      'not_connection_owner',
      `Connection ${id} acts with its owner's credentials; only its owner (${row.owner_user_id}) may use or reconnect it.`,
    );
  }
  return row;
}

/** The connector of an existing connection, as its owner sees it; an owner who lost it has a connection that cannot be used. */
async function connectorOf(ctx: RequestContext, row: repo.ConnectionRow): Promise<ResolvedConnector> {
  const connector = await connectorFor(ctx, row.connector_slug);
  if (!connector)
    throw new ApiError('connection_needs_reauth', `The connector ${row.connector_slug} of connection ${row.id} is no longer available to its owner.`);
  return connector;
}

/** Members of a create or reconnect body that the connector's auth type does not take: 400 validation_failed. */
function checkMembersFit(connector: ResolvedConnector, body: { api_key?: string; scopes?: string[]; return_to?: string }, apiKeyRequired: boolean): void {
  const problems: ValidationProblem[] = [];
  const type = connector.auth.type;
  const refuse = (member: string) => problems.push({ in: 'body', pointer: `/${member}`, message: `does not apply to ${type} connectors` });
  if (type !== 'api_key' && body.api_key !== undefined) refuse('api_key');
  if (type !== 'oauth2' && body.scopes !== undefined) refuse('scopes');
  if (type !== 'oauth2' && body.return_to !== undefined) refuse('return_to');
  if (type === 'api_key' && apiKeyRequired && body.api_key === undefined)
    problems.push({ in: 'body', pointer: '/api_key', message: 'is required for api_key connectors' });
  if (problems.length > 0) throw validationError(problems);
}

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

export async function list(ctx: RequestContext, page: PageRequest, filter: repo.ListFilter): Promise<Page<Connection>> {
  const problems: ValidationProblem[] = [];
  if (filter.owner_user_id !== undefined && filter.owner_user_id !== ctx.user) {
    if (!canManage(ctx)) throw new ApiError('missing_permission', "Listing another member's connections needs the permission connection:manage.");
    if (!(await repo.activeMember(ctx.db, ctx.orgId, filter.owner_user_id))) {
      problems.push({ in: 'query', pointer: '/owner_user_id', message: 'is not a member of this organization' });
    }
  }
  if (filter.connector_slug !== undefined && !(await connectorFor(ctx, filter.connector_slug))) {
    problems.push({ in: 'query', pointer: '/connector_slug', message: 'names no connector you can see' });
  }
  if (problems.length > 0)
    throw new ApiError('unknown_reference', 'A filter names something that does not exist or that you cannot see.', { errors: problems });
  const owner = canManage(ctx) ? filter.owner_user_id : ctx.user;
  const rows = await repo.listConnections(ctx.db, ctx.orgId, page, { ...filter, owner_user_id: owner });
  return toPage(rows, page, (row) => toConnection(ctx, row));
}

export async function get(ctx: RequestContext, id: string): Promise<Connection> {
  return toConnection(ctx, await visible(ctx, id));
}

// ---------------------------------------------------------------------------------------
// Create, rename, delete
// ---------------------------------------------------------------------------------------

export async function create(ctx: RequestContext, body: Create): Promise<Connection> {
  const connector = await connectorFor(ctx, body.connector_slug);
  if (!connector) {
    throw new ApiError('unknown_reference', `No connector ${body.connector_slug} that you can see.`, {
      errors: [{ in: 'body', pointer: '/connector_slug', message: 'names no connector you can see' }],
    });
  }
  checkMembersFit(connector, body, true);
  await requireWithinLimit(ctx.db, ctx.orgId, 'connections', () => repo.countConnections(ctx.db, ctx.orgId));
  const id = newId('connection');
  const name = body.name ?? connector.name;
  let credentials: StoredCredentials | null = null;
  let tools: ConnectionTool[] | null = null;
  let started: StartedAuthorization | null = null;
  if (connector.auth.type === 'oauth2') {
    started = await startAuthorization(ctx, id, { ...connector, auth: connector.auth }, null, {
      scopes: body.scopes,
      returnTo: body.return_to ?? null,
      fallbackScopes: [],
    });
  } else {
    credentials = body.api_key !== undefined ? { type: 'api_key', api_key: body.api_key } : null;
    tools = await tryCredentials(ctx, connector, credentials);
  }
  const now = new Date();
  return ctx.write(async (w) => {
    await requireWithinLimit(w.db, ctx.orgId, 'connections', () => repo.countConnections(w.db, ctx.orgId));
    const row = await repo.insertConnection(w.db, {
      id,
      org_id: ctx.orgId,
      connector_slug: connector.slug,
      owner_user_id: ctx.user,
      name,
      status: started ? 'pending' : 'active',
      auth_type: connector.auth.type,
      credentials_enc: credentials ? sealCredentials(ctx, id, credentials, connector.mcp_url) : null,
      scopes: started?.scopes ?? [],
      last_used_at: started ? null : now,
      oauth_client_enc: started?.oauth_client_enc ?? null,
      authorize_state_hash: started?.authorize_state_hash ?? null,
      authorize_enc: started?.authorize_enc ?? null,
      authorize_expires_at: started?.authorize_expires_at ?? null,
    });
    if (tools) await repo.saveTools(w.db, id, tools, now);
    w.audit({
      targetId: id,
      changes: { connector_slug: connector.slug, name, auth_type: connector.auth.type, status: row.status, ...(started ? { scopes: started.scopes } : {}) },
    });
    w.emit('connection.created', { connection: eventConnection(row) });
    return toConnection(ctx, row);
  });
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<Connection> {
  return ctx.write(async (w) => {
    const row = await visible(ctx, id, true, w.db);
    const updated = body.name !== undefined ? await repo.updateConnection(w.db, ctx.orgId, id, { name: body.name }) : row;
    if (!updated) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { name: body.name } });
    return toConnection(ctx, updated);
  });
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  const deleted = await ctx.write(async (w) => {
    await visible(ctx, id, true, w.db);
    const row = await repo.deleteConnection(w.db, ctx.orgId, id);
    if (!row) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { connector_slug: row.connector_slug, name: row.name, owner_user_id: row.owner_user_id } });
    w.emit('connection.deleted', { connection: eventConnection(row) });
    return row;
  });
  // After the commit, outside the transaction: the provider is asked to revoke, best effort.
  if (deleted.auth_type === 'oauth2' && deleted.credentials_enc) {
    // The provider's settings as the connector holds them, whoever may see it now.
    const connector = await connectorFor(ctx, deleted.connector_slug, deleted.owner_user_id, true).catch(() => null);
    await revokeTokens(ctx, deleted, connector).catch((err: unknown) => ctx.log.info({ connection_id: id, err: String(err) }, 'token revocation failed'));
  }
}

// ---------------------------------------------------------------------------------------
// Reconnect
// ---------------------------------------------------------------------------------------

export async function reconnect(ctx: RequestContext, id: string, body: Reconnect | undefined): Promise<Connection> {
  const input = body ?? {};
  const row = await owned(ctx, id);
  const connector = await connectorFor(ctx, row.connector_slug);
  if (!connector) {
    throw new ApiError('validation_failed', `The connector ${row.connector_slug} is no longer available to you; this connection cannot be reconnected.`, {
      errors: [{ in: 'path', pointer: '/id', message: 'names a connection whose connector you no longer see' }],
    });
  }
  checkMembersFit(connector, input, false);

  if (connector.auth.type === 'oauth2') {
    const started = await startAuthorization(ctx, id, { ...connector, auth: connector.auth }, openOAuthClient(ctx, row), {
      scopes: input.scopes,
      returnTo: input.return_to ?? null,
      fallbackScopes: row.scopes,
    });
    return ctx.write(async (w) => {
      const updated = await repo.updateConnection(w.db, ctx.orgId, id, {
        oauth_client_enc: started.oauth_client_enc,
        authorize_state_hash: started.authorize_state_hash,
        authorize_enc: started.authorize_enc,
        authorize_expires_at: started.authorize_expires_at,
        ...(row.status === 'pending' ? { scopes: started.scopes } : {}),
      });
      if (!updated) throw notFound(WHAT, id);
      w.audit({ targetId: id, changes: { authorization: 'started', scopes: started.scopes } });
      return toConnection(ctx, updated);
    });
  }

  const stored = openCredentials(ctx, row);
  let credentials: StoredCredentials | null = null;
  if (connector.auth.type === 'api_key') {
    if (input.api_key !== undefined) credentials = { type: 'api_key', api_key: input.api_key };
    // A stored key is checked again only where it was obtained: never tried on the connector's new address.
    else if (stored?.type === 'api_key' && mayGoTo(stored, connector.mcp_url)) credentials = stored;
    else if (stored?.type === 'api_key')
      throw validationError([
        { in: 'body', pointer: '/api_key', message: 'is required: the stored key was obtained for another address than the connector now names' },
      ]);
    else throw validationError([{ in: 'body', pointer: '/api_key', message: 'is required: this connection has no stored key' }]);
  }
  let tools: ConnectionTool[];
  try {
    tools = await tryCredentials(ctx, connector, credentials);
  } catch (err) {
    // The stored key, checked again and refused: the connection needs its owner.
    if (err instanceof ApiError && err.code === 'upstream_credentials_rejected' && input.api_key === undefined && connector.auth.type === 'api_key') {
      const message = 'The upstream refused the stored API key.';
      await markNeedsReauth(ctx, row, 'credentials_rejected', message);
      throw needsReauthError(id, message);
    }
    throw err;
  }
  const now = new Date();
  return ctx.write(async (w) => {
    const current = await repo.findConnection(w.db, ctx.orgId, id, true);
    if (!current) throw notFound(WHAT, id);
    const updated = await repo.updateConnection(w.db, ctx.orgId, id, {
      credentials_enc: credentials ? sealCredentials(ctx, id, credentials, connector.mcp_url) : null,
      status: 'active',
      status_reason: null,
      ...(current.status === 'active' ? {} : { status_changed_at: now }),
      last_error: null,
      last_used_at: now,
    });
    if (!updated) throw notFound(WHAT, id);
    await repo.saveTools(w.db, id, tools, now);
    w.audit({ targetId: id, changes: { status: 'active', ...(input.api_key !== undefined ? { api_key: SECRET_CHANGED } : {}) } });
    return toConnection(ctx, updated);
  });
}

// ---------------------------------------------------------------------------------------
// Transfer
// ---------------------------------------------------------------------------------------

export async function transfer(ctx: RequestContext, id: string, body: Transfer): Promise<Connection> {
  const row = await visible(ctx, id);
  const to = body.user_id;
  if (to === row.owner_user_id) throw new ApiError('conflict', `${to} already owns connection ${id}.`);
  const access = await loadMemberAccess(ctx.db, to, ctx.orgId);
  if (!access) {
    throw new ApiError('unknown_reference', `${to} is not an active member of this organization.`, {
      errors: [{ in: 'body', pointer: '/user_id', message: 'is not an active member of this organization' }],
    });
  }
  const unfit = !access.permissions.has('connection:use')
    ? 'does not hold connection:use'
    : !(await connectorFor(ctx, row.connector_slug, to, access.permissions.has('connector:manage')))
      ? `cannot see the connector ${row.connector_slug}`
      : null;
  if (unfit) throw validationError([{ in: 'body', pointer: '/user_id', message: unfit }]);
  // Nobody takes over another person's upstream identity: credentials go with the owner's own transfer only.
  const keepsCredentials = row.owner_user_id === ctx.user;
  return ctx.write(async (w) => {
    const current = await visible(ctx, id, true, w.db);
    // Kept credentials act as whoever authorized them: the new owner accepts before the
    // connection serves them. Discarded ones leave nothing to accept (they reconnect with theirs).
    const changes: repo.ConnectionChanges = {
      owner_user_id: to,
      authorize_state_hash: null,
      authorize_enc: null,
      authorize_expires_at: null,
      transferred_from_user_id: current.owner_user_id,
      transferred_at: new Date(),
      awaiting_acceptance: keepsCredentials,
    };
    if (!keepsCredentials) {
      Object.assign(changes, {
        credentials_enc: null,
        status: 'disconnected',
        status_reason: 'transferred',
        status_changed_at: new Date(),
        last_error: null,
      } satisfies repo.ConnectionChanges);
    }
    const updated = await repo.updateConnection(w.db, ctx.orgId, id, changes);
    if (!updated) throw notFound(WHAT, id);
    if (!keepsCredentials) {
      await repo.forgetTools(w.db, id);
      w.emit('connection.disconnected', { connection: eventConnection(updated), reason: `Transferred to ${to} by ${ctx.user}; the new owner must reconnect.` });
    }
    w.audit({
      targetId: id,
      changes: {
        owner_user_id: { from: current.owner_user_id, to },
        credentials: keepsCredentials ? 'kept' : 'discarded',
        awaiting_acceptance: keepsCredentials,
      },
    });
    return toConnection(ctx, updated);
  });
}

/** The new owner agrees that a connection handed over with its credentials acts for them. */
export async function accept(ctx: RequestContext, id: string): Promise<Connection> {
  return ctx.write(async (w) => {
    const row = await visible(ctx, id, true, w.db);
    if (row.owner_user_id !== ctx.user) {
      throw new ApiError('not_connection_owner', `Connection ${id} would act for its owner (${row.owner_user_id}); only they may accept it.`);
    }
    if (!row.awaiting_acceptance) throw new ApiError('invalid_transition', `Connection ${id} is not awaiting acceptance.`);
    const updated = await repo.updateConnection(w.db, ctx.orgId, id, { awaiting_acceptance: false });
    if (!updated) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { awaiting_acceptance: { from: true, to: false }, transferred_from_user_id: row.transferred_from_user_id } });
    return toConnection(ctx, updated);
  });
}

// ---------------------------------------------------------------------------------------
// The upstream's tools
// ---------------------------------------------------------------------------------------

export interface ToolsPage extends Page<ConnectionTool> {
  fetchedAt: Date;
  stale: boolean;
}

const byName = (a: ConnectionTool, b: ConnectionTool) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/**
 * The upstream's tools, a page at a time by name: from what was fetched within the TTL, else
 * from the upstream (every page of its `tools/list`), kept for next time. When the upstream
 * cannot be reached, the last list fetched is answered as stale; with none, 502.
 */
export async function listTools(ctx: RequestContext, id: string, page: PageRequest): Promise<ToolsPage> {
  const row = await owned(ctx, id);
  if (row.status !== 'active') throw needsReauthError(id, `it is ${row.status}.`);
  const cached = await repo.findTools(ctx.db, id);
  const ttlMs = ctx.deps.config.connectionToolsTtlSeconds * 1000;
  const now = new Date();
  const answer = (tools: ConnectionTool[], fetchedAt: Date, stale: boolean): ToolsPage => ({
    ...pageOfSorted([...tools].sort(byName), (tool) => tool.name, page),
    fetchedAt,
    stale,
  });
  if (cached && now.getTime() - cached.fetched_at.getTime() < ttlMs) {
    void repo.recordUse(ctx.db, id, now, row.last_error).catch(() => undefined);
    return answer(cached.tools as ConnectionTool[], cached.fetched_at, false);
  }
  const connector = await connectorOf(ctx, row);
  try {
    const tools = await withConnection(ctx, row, connector, async (credential) =>
      (await listUpstreamTools({ url: connector.mcp_url, transport: connector.transport, credential }, upstreamLimits(ctx), ctx.signal)).map(toTool),
    );
    const fetchedAt = new Date();
    await repo.saveTools(ctx.db, id, tools, fetchedAt);
    await repo.recordUse(ctx.db, id, fetchedAt, null);
    return answer(tools, fetchedAt, false);
  } catch (err) {
    if (!(err instanceof UpstreamUnavailable)) throw err;
    ctx.log.info({ connection_id: id, reason: err.detail }, 'upstream unavailable while listing tools');
    await repo.recordError(ctx.db, id, `Listing tools failed: ${err.message}`);
    if (cached) return answer(cached.tools as ConnectionTool[], cached.fetched_at, true);
    throw unavailable(err);
  }
}
