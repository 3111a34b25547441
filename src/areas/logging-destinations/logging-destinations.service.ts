import type { components } from '../../../generated/openapi';
import { requireFeature } from '../../access/entitlements';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError, type ValidationProblem } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { refuseUrl } from '../../outbound/client';
import { senderFor } from './logging-destinations.consumer';
import { testRecord, type DestinationType, type StoredConfig, type StoredSecrets } from './logging-destinations.formats';
import * as repo from './logging-destinations.repo';
import { secretsContext } from './logging-destinations.sender';

type Destination = components['schemas']['LoggingDestination'];
type Create = components['schemas']['LoggingDestinationCreate'];
type Update = components['schemas']['LoggingDestinationUpdate'];
type TestResult = components['schemas']['LoggingDestinationTestResult'];
type RecordType = components['schemas']['LoggingRecordType'];

const WHAT = 'logging destination';
const NAME_CONSTRAINT = 'logging_destinations_org_id_name_key';
const RECORD_TYPES: readonly RecordType[] = ['audit', 'tool_call'];
/** Headers the server sets itself: a destination may not override how its body is framed. */
const RESERVED_HEADERS = new Set(['host', 'content-length', 'content-type', 'content-encoding', 'transfer-encoding', 'connection']);

/** The `config` members each type takes; any other is refused on update. */
const MEMBERS: Readonly<Record<DestinationType, ReadonlySet<string>>> = {
  http: new Set(['url', 'headers']),
  datadog: new Set(['site', 'api_key', 'source', 'service']),
  splunk_hec: new Set(['url', 'hec_token', 'index', 'source', 'sourcetype', 'request_channel']),
  otlp_http: new Set(['url', 'headers', 'service']),
};

const inCatalogOrder = (types: readonly string[]): RecordType[] => RECORD_TYPES.filter((type) => types.includes(type));

export function toDestination(row: repo.DestinationRow): Destination {
  const c = row.config;
  const hasSecrets = row.secrets_enc !== null;
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    config: {
      url: c.url,
      site: c.site,
      index: c.index,
      source: c.source,
      sourcetype: c.sourcetype,
      request_channel: c.request_channel,
      service: c.service,
      header_names: c.header_names,
      has_api_key: row.type === 'datadog' && hasSecrets,
      has_hec_token: row.type === 'splunk_hec' && hasSecrets,
      has_header_values: c.header_names.length > 0,
    },
    record_types: inCatalogOrder(row.record_types),
    is_active: row.is_active,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    created_by_user_id: row.created_by_user_id,
    last_test_at: row.last_test_at?.toISOString() ?? null,
    last_test_status: row.last_test_status,
    last_test_error: row.last_test_error,
    last_delivery_at: row.last_delivery_at?.toISOString() ?? null,
    last_delivery_error: row.last_delivery_error,
    pending_records: row.pending_records,
    next_delivery_attempt_at: row.pending_records > 0 ? (row.next_delivery_at?.toISOString() ?? null) : null,
  };
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

function checkUrl(ctx: RequestContext, url: string): void {
  const reason = refuseUrl(url, ctx.deps.config.outbound);
  if (!reason) return;
  const problem = [{ in: 'body' as const, pointer: '/config/url', message: reason }];
  // A credential in the URL would be shown to every reader of the destination: a validation error, not an address problem.
  if (reason.includes('user name or password')) throw validationError(problem);
  throw new ApiError('outbound_url_not_allowed', `config.url ${reason}.`, { errors: problem });
}

function checkHeaderNames(names: readonly string[]): void {
  const problems: ValidationProblem[] = [];
  const seen = new Set<string>();
  for (const name of names) {
    const lower = name.toLowerCase();
    const pointer = `/config/headers/${name.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    if (RESERVED_HEADERS.has(lower)) problems.push({ in: 'body', pointer, message: 'is set by the server and cannot be sent' });
    else if (seen.has(lower)) problems.push({ in: 'body', pointer, message: 'is given twice (header names are case-insensitive)' });
    seen.add(lower);
  }
  if (problems.length > 0) throw validationError(problems);
}

const originOf = (url: string | null): string | null => (url ? new URL(url).origin : null);

/**
 * Stored secrets go only where they went before: a new origin (or Datadog site) must come with
 * the secret in the same request, so that someone who never saw it cannot send it to a host
 * of theirs (by pointing the URL there and pressing `test`).
 */
function requireSecretsForNewPlace(row: repo.DestinationRow, config: NonNullable<Update['config']>, headers: Record<string, string>): void {
  const stored = row.config;
  if (row.type === 'datadog') {
    if (config.site !== undefined && config.site !== stored.site && config.api_key === undefined) {
      throw new ApiError('secret_required', `Changing the Datadog site sends the API key to another intake; send config.api_key for ${config.site} too.`, {
        errors: [{ in: 'body', pointer: '/config/api_key', message: 'is required when config.site changes' }],
      });
    }
    return;
  }
  if (config.url === undefined || originOf(config.url) === originOf(stored.url)) return;
  if (row.type === 'splunk_hec') {
    if (row.secrets_enc !== null && config.hec_token === undefined) {
      throw new ApiError(
        'secret_required',
        'The HEC token is never sent to a new host unless it is given again; send config.hec_token with the new config.url.',
        {
          errors: [{ in: 'body', pointer: '/config/hec_token', message: 'is required when config.url moves to another origin' }],
        },
      );
    }
    return;
  }
  const resent = new Set(Object.keys(config.headers ?? {}).map((name) => name.toLowerCase()));
  const missing = Object.keys(headers).filter((name) => !resent.has(name.toLowerCase()));
  if (missing.length > 0) {
    throw new ApiError(
      'secret_required',
      `Header values are never sent to a new host unless they are given again; send config.headers with a value (or null to remove it) for ${missing.join(', ')}.`,
      {
        errors: missing.map((name) => ({
          in: 'body' as const,
          pointer: `/config/headers/${name}`,
          message: 'is required when config.url moves to another origin',
        })),
      },
    );
  }
}

function openSecrets(ctx: RequestContext, row: { id: string; secrets_enc: string | null }): StoredSecrets {
  if (!row.secrets_enc) return {};
  try {
    return JSON.parse(ctx.deps.secrets.open(row.secrets_enc, secretsContext(row.id))) as StoredSecrets;
  } catch {
    // Unreadable (a lost key): whatever is sent now replaces it.
    return {};
  }
}

const sealSecrets = (ctx: RequestContext, id: string, secrets: StoredSecrets): string | null =>
  Object.keys(secrets).length === 0 ? null : ctx.deps.secrets.seal(JSON.stringify(secrets), secretsContext(id));

const nameTaken = (name: string) => new ApiError('name_taken', `Another logging destination of this organization is named "${name}".`);

const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined ? run() : conflictOnUnique(NAME_CONSTRAINT, () => nameTaken(name), run);

// ---------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------

export async function list(
  ctx: RequestContext,
  page: PageRequest,
  filter: { type?: string; record_type?: string; is_active?: boolean },
): Promise<Page<Destination>> {
  const rows = await repo.listDestinations(ctx.db, ctx.orgId, page, filter);
  return toPage(rows, page, toDestination);
}

export async function get(ctx: RequestContext, id: string): Promise<Destination> {
  const row = await repo.findDestination(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return toDestination(row);
}

export async function create(ctx: RequestContext, body: Create): Promise<Destination> {
  const id = newId('loggingDestination');
  const config: StoredConfig = { url: null, site: null, index: null, source: null, sourcetype: null, request_channel: null, service: null, header_names: [] };
  const secrets: StoredSecrets = {};
  switch (body.type) {
    case 'http':
    case 'otlp_http': {
      checkUrl(ctx, body.config.url);
      config.url = body.config.url;
      const headers = body.config.headers ?? {};
      checkHeaderNames(Object.keys(headers));
      config.header_names = Object.keys(headers);
      if (config.header_names.length > 0) secrets.headers = headers;
      if (body.type === 'otlp_http') config.service = body.config.service ?? null;
      break;
    }
    case 'datadog':
      config.site = body.config.site;
      config.source = body.config.source ?? null;
      config.service = body.config.service ?? null;
      secrets.api_key = body.config.api_key;
      break;
    case 'splunk_hec':
      checkUrl(ctx, body.config.url);
      config.url = body.config.url;
      config.index = body.config.index ?? null;
      config.source = body.config.source ?? null;
      config.sourcetype = body.config.sourcetype ?? null;
      config.request_channel = body.config.request_channel ?? null;
      secrets.hec_token = body.config.hec_token;
      break;
  }
  const recordTypes = inCatalogOrder(body.record_types);
  const isActive = body.is_active ?? true;
  await requireFeature(ctx.db, ctx.orgId, 'audit_log_export');
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const row = await repo.insertDestination(w.db, {
        id,
        org_id: ctx.orgId,
        name: body.name,
        type: body.type,
        config: JSON.stringify(config),
        secrets_enc: sealSecrets(ctx, id, secrets),
        record_types: recordTypes,
        is_active: isActive,
        created_by_user_id: ctx.user,
      });
      w.audit({ targetId: id, changes: { name: body.name, type: body.type, record_types: recordTypes, is_active: isActive, config } });
      return toDestination(row);
    }),
  );
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<Destination> {
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const row = await repo.findDestination(w.db, ctx.orgId, id, true);
      if (!row) throw notFound(WHAT, id);
      if (body.type !== undefined && body.type !== row.type) {
        throw new ApiError('immutable_field', `The type of a destination cannot change (it is ${row.type}); create a new destination instead.`, {
          errors: [{ in: 'body', pointer: '/type', message: `must be ${row.type}` }],
        });
      }
      if (body.is_active === true && !row.is_active) await requireFeature(w.db, ctx.orgId, 'audit_log_export');
      const changes: Parameters<typeof repo.updateDestination>[3] = {};
      const before: Record<string, unknown> = { name: row.name, record_types: row.record_types, is_active: row.is_active, config: row.config };
      const after: Record<string, unknown> = {};
      const secretNames: string[] = [];
      let endpointChanged = false;
      if (body.config) {
        const misplaced: ValidationProblem[] = Object.keys(body.config)
          .filter((key) => !MEMBERS[row.type].has(key))
          .map((key) => ({ in: 'body', pointer: `/config/${key}`, message: `does not apply to ${row.type} destinations` }));
        if (misplaced.length > 0) throw validationError(misplaced);
        if (body.config.url !== undefined) checkUrl(ctx, body.config.url);
        const { api_key: apiKey, hec_token: hecToken, headers: headerChanges, ...settings } = body.config;
        const secrets = openSecrets(ctx, row);
        let headers: Record<string, string> = { ...secrets.headers };
        requireSecretsForNewPlace(row, body.config, headers);
        if (headerChanges) {
          headers = mergeHeaders(headers, headerChanges);
          checkHeaderNames(Object.keys(headers));
          if (Object.keys(headers).length > 20) {
            throw validationError([{ in: 'body', pointer: '/config/headers', message: 'a destination takes at most 20 headers' }]);
          }
          before.headers = secrets.headers ?? {};
          after.headers = headers;
          secretNames.push('headers');
        }
        if (apiKey !== undefined) {
          before.api_key = secrets.api_key ?? null;
          after.api_key = secrets.api_key = apiKey;
          secretNames.push('api_key');
        }
        if (hecToken !== undefined) {
          before.hec_token = secrets.hec_token ?? null;
          after.hec_token = secrets.hec_token = hecToken;
          secretNames.push('hec_token');
        }
        const merged: StoredConfig = { ...row.config, ...settings, header_names: headerChanges ? Object.keys(headers) : row.config.header_names };
        if (canonical(merged) !== canonical(row.config)) {
          changes.config = JSON.stringify(merged);
          after.config = merged;
        }
        if (secretNames.length > 0) {
          if (headerChanges) secrets.headers = headers;
          if (secrets.headers && Object.keys(secrets.headers).length === 0) delete secrets.headers;
          changes.secrets_enc = sealSecrets(ctx, id, secrets);
        }
        endpointChanged = secretNames.length > 0 || settings.url !== undefined || settings.site !== undefined || settings.request_channel !== undefined;
      }
      if (body.name !== undefined) changes.name = after.name = body.name;
      if (body.record_types !== undefined) changes.record_types = after.record_types = inCatalogOrder(body.record_types);
      if (body.is_active !== undefined) changes.is_active = after.is_active = body.is_active;
      // New endpoint or credentials: what waits is tried at once, not after the old backoff.
      if (endpointChanged) Object.assign(changes, { next_delivery_at: null, delivery_attempts: 0 });
      if (body.is_active === false && row.is_active) await repo.dropPending(w.db, id);
      if (body.record_types !== undefined) {
        const dropped = RECORD_TYPES.filter((type) => !body.record_types?.includes(type));
        if (dropped.length > 0)
          await repo.dropPending(
            w.db,
            id,
            dropped.map((type) => (type === 'audit' ? 'audit.recorded' : 'tool_call.recorded')),
          );
      }
      const updated = Object.keys(changes).length > 0 ? await repo.updateDestination(w.db, ctx.orgId, id, changes) : row;
      if (!updated) throw notFound(WHAT, id);
      w.audit({ targetId: id, changes: changedMembers(before, after, { secrets: secretNames }) });
      return toDestination(updated);
    }),
  );
}

/** Headers merged by name (case-insensitive, as HTTP has them): a value sets or replaces in place, null removes, the rest stay in order. */
function mergeHeaders(stored: Record<string, string>, changes: Record<string, string | null>): Record<string, string> {
  const pending = new Map(Object.entries(changes).map(([name, value]) => [name.toLowerCase(), { name, value }]));
  const merged: Record<string, string> = {};
  for (const [name, value] of Object.entries(stored)) {
    const change = pending.get(name.toLowerCase());
    if (!change) merged[name] = value;
    else if (change.value !== null) merged[change.name] = change.value;
    pending.delete(name.toLowerCase());
  }
  for (const { name, value } of pending.values()) if (value !== null) merged[name] = value;
  return merged;
}

function canonical(config: StoredConfig): string {
  return JSON.stringify(Object.entries(config).sort(([a], [b]) => a.localeCompare(b)));
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const deleted = await repo.deleteDestination(w.db, ctx.orgId, id);
    if (!deleted) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { name: deleted.name, type: deleted.type } });
  });
}

/** Sends first, outside any transaction, then records the outcome with its audit entry. */
export async function test(ctx: RequestContext, id: string): Promise<TestResult> {
  const row = await repo.findDestination(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  const sender = senderFor(ctx.deps);
  const target = sender.open(row);
  const at = new Date();
  let outcome: { status: 'ok' | 'failed'; error: string | null };
  if (typeof target === 'string') {
    outcome = { status: 'failed', error: target };
  } else {
    const { verdict, detail } = await sender.send(target, [testRecord(newId('event'), ctx.orgId, id, at)]);
    outcome = verdict.kind === 'ok' ? { status: 'ok', error: verdict.warning } : { status: 'failed', error: verdict.error };
    if (verdict.kind !== 'ok') ctx.log.info({ logging_destination_id: id, reason: verdict.error, detail }, 'test record not delivered');
  }
  const updated = await ctx.write(async (w) => {
    const recorded = await repo.updateDestination(w.db, ctx.orgId, id, { last_test_at: at, last_test_status: outcome.status, last_test_error: outcome.error });
    if (!recorded) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { last_test_status: outcome.status } });
    return recorded;
  });
  return { status: outcome.status, error: outcome.error, destination: toDestination(updated) };
}
