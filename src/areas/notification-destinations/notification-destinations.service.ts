import type { components } from '../../../generated/openapi';

import { EVENT_TYPES, type EventType } from '../../events/catalog';
import { eventBody } from '../../events/outbox';
import { sendToDestination, webhookUrlContext, type DeliveryOutcome, type DestinationConfig } from '../../events/senders';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError, type ValidationProblem } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { refuseUrl } from '../../outbound/client';
import * as repo from './notification-destinations.repo';

type Destination = components['schemas']['NotificationDestination'];
type Create = components['schemas']['NotificationDestinationCreate'];
type Update = components['schemas']['NotificationDestinationUpdate'];
type TestResult = components['schemas']['NotificationDestinationTestResult'];

const WHAT = 'notification destination';
const NAME_CONSTRAINT = 'notification_destinations_org_id_name_key';
const EMAIL_ONLY = new Set(['to', 'cc', 'bcc']);
const SLACK_ONLY = new Set(['webhook_url']);

const inCatalogOrder = (types: readonly string[]): EventType[] => EVENT_TYPES.filter((type) => types.includes(type));

export function toDestination(row: repo.DestinationRow): Destination {
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    config: {
      to: row.config.to,
      cc: row.config.cc,
      bcc: row.config.bcc,
      subject_prefix: row.config.subject_prefix,
      has_webhook_url: row.webhook_url_enc !== null,
    },
    event_types: inCatalogOrder(row.event_types),
    is_active: row.is_active,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    created_by_user_id: row.created_by_user_id,
    last_test_at: row.last_test_at?.toISOString() ?? null,
    last_test_status: row.last_test_status,
    last_test_error: row.last_test_error,
  };
}

/** Slack's incoming webhooks live on one host; anything else would make a Slack destination a general webhook. */
function slackHostReason(url: string, allowed: readonly string[]): string | null {
  const host = new URL(url).hostname.toLowerCase();
  return allowed.includes(host) ? null : `must be a Slack incoming webhook on ${allowed.join(' or ')}`;
}

function checkWebhookUrl(ctx: RequestContext, url: string): void {
  const reason = refuseUrl(url, ctx.deps.config.outbound) ?? slackHostReason(url, ctx.deps.config.slackWebhookHosts);
  if (reason) {
    throw new ApiError('outbound_url_not_allowed', `config.webhook_url ${reason}.`, {
      errors: [{ in: 'body', pointer: '/config/webhook_url', message: reason }],
    });
  }
}

const nameTaken = (name: string) => new ApiError('name_taken', `Another notification destination of this organization is named "${name}".`);

const guardName = <T>(name: string | undefined, run: () => Promise<T>): Promise<T> =>
  name === undefined ? run() : conflictOnUnique(NAME_CONSTRAINT, () => nameTaken(name), run);

export async function list(ctx: RequestContext, page: PageRequest, filter: { type?: string; is_active?: boolean }): Promise<Page<Destination>> {
  const rows = await repo.listDestinations(ctx.db, ctx.orgId, page, filter);
  return toPage(rows, page, toDestination);
}

type Delivery = components['schemas']['NotificationDelivery'];

export async function listDeliveries(
  ctx: RequestContext,
  id: string,
  page: PageRequest,
  filter: { status?: string; event_type?: string },
): Promise<Page<Delivery>> {
  if (!(await repo.findDestination(ctx.db, ctx.orgId, id))) throw notFound(WHAT, id);
  const rows = await repo.listDeliveries(ctx.db, ctx.orgId, id, page, filter);
  return toPage(rows, page, (row) => ({
    id: row.id,
    destination_id: row.destination_id,
    event: eventBody({ ...row, id: row.event_id, created_at: row.event_created_at }) as Delivery['event'],
    status: row.status,
    attempts: row.attempts,
    last_attempt_at: row.last_attempt_at?.toISOString() ?? null,
    next_attempt_at: row.next_attempt_at?.toISOString() ?? null,
    last_error: row.last_error,
    delivered_at: row.delivered_at?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
  }));
}

export async function get(ctx: RequestContext, id: string): Promise<Destination> {
  const row = await repo.findDestination(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return toDestination(row);
}

export async function create(ctx: RequestContext, body: Create): Promise<Destination> {
  const id = newId('notificationDestination');
  let config: DestinationConfig;
  let webhookUrlEnc: string | null = null;
  if (body.type === 'slack') {
    checkWebhookUrl(ctx, body.config.webhook_url);
    webhookUrlEnc = ctx.deps.secrets.seal(body.config.webhook_url, webhookUrlContext(id));
    config = { to: [], cc: [], bcc: [], subject_prefix: body.config.subject_prefix ?? null };
  } else {
    config = { to: body.config.to, cc: body.config.cc ?? [], bcc: body.config.bcc ?? [], subject_prefix: body.config.subject_prefix ?? null };
  }
  const eventTypes = inCatalogOrder(body.event_types);
  const isActive = body.is_active ?? true;
  return guardName(body.name, () =>
    ctx.write(async (w) => {
      const row = await repo.insertDestination(w.db, {
        id,
        org_id: ctx.orgId,
        name: body.name,
        type: body.type,
        config: JSON.stringify(config),
        webhook_url_enc: webhookUrlEnc,
        event_types: eventTypes,
        is_active: isActive,
        created_by_user_id: ctx.user,
      });
      w.audit({ targetId: id, changes: { name: body.name, type: body.type, event_types: eventTypes, is_active: isActive, config } });
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
      const changes: Parameters<typeof repo.updateDestination>[3] = {};
      const before: Record<string, unknown> = { name: row.name, event_types: row.event_types, is_active: row.is_active, config: row.config, webhook_url: null };
      const after: Record<string, unknown> = {};
      if (body.config) {
        const misplaced: ValidationProblem[] = Object.keys(body.config)
          .filter((key) => (row.type === 'slack' ? EMAIL_ONLY : SLACK_ONLY).has(key))
          .map((key) => ({ in: 'body', pointer: `/config/${key}`, message: `does not apply to ${row.type} destinations` }));
        if (misplaced.length > 0) throw validationError(misplaced);
        const { webhook_url: webhookUrl, ...settings } = body.config;
        if (webhookUrl !== undefined) {
          checkWebhookUrl(ctx, webhookUrl);
          changes.webhook_url_enc = ctx.deps.secrets.seal(webhookUrl, webhookUrlContext(id));
          // Compared as a secret: shown as {changed: true} whatever it was.
          after.webhook_url = webhookUrl;
        }
        if (Object.keys(settings).length > 0) {
          const merged = { ...row.config, ...settings };
          changes.config = JSON.stringify(merged);
          after.config = merged;
        }
      }
      if (body.name !== undefined) changes.name = after.name = body.name;
      if (body.event_types !== undefined) changes.event_types = after.event_types = inCatalogOrder(body.event_types);
      if (body.is_active !== undefined) changes.is_active = after.is_active = body.is_active;
      const updated = Object.keys(changes).length > 0 ? await repo.updateDestination(w.db, ctx.orgId, id, changes) : row;
      if (!updated) throw notFound(WHAT, id);
      w.audit({ targetId: id, changes: changedMembers(before, after, { secrets: ['webhook_url'] }) });
      return toDestination(updated);
    }),
  );
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const deleted = await repo.deleteDestination(w.db, ctx.orgId, id);
    if (!deleted) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { name: deleted.name, type: deleted.type } });
  });
}

function testText(destinationName: string, orgName: string, events: readonly string[]): string {
  return [
    `This is a test message from the MCP control plane for the notification destination "${destinationName}" of ${orgName}.`,
    `It is subscribed to: ${events.length > 0 ? events.join(', ') : 'no events'}.`,
  ].join('\n');
}

function deliverTest(ctx: RequestContext, row: repo.DestinationRow, orgName: string): Promise<DeliveryOutcome> {
  return sendToDestination({ mailer: ctx.deps.mailer, secrets: ctx.deps.secrets, outbound: ctx.deps.config.outbound }, row, {
    subject: 'Test notification from the MCP control plane',
    text: testText(row.name, orgName, row.event_types),
  });
}

/** Sends first, outside any transaction, then records the outcome with its audit entry. */
/** A test message reaches real inboxes or channels: one per destination per cooldown (429 with Retry-After otherwise). */
async function takeTestTurn(ctx: RequestContext, id: string): Promise<repo.DestinationRow> {
  const cooldownMs = ctx.deps.config.notificationTestCooldownSeconds * 1000;
  const now = new Date();
  const claimed = await repo.claimTest(ctx.db, ctx.orgId, id, now, cooldownMs);
  if (claimed) return claimed;
  const row = await repo.findDestination(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  const seconds = Math.max(1, Math.ceil(((row.last_test_at?.getTime() ?? 0) + cooldownMs - now.getTime()) / 1000));
  throw new ApiError('rate_limited', `This destination was tested moments ago; test it again in ${seconds} seconds.`, {
    headers: { 'Retry-After': String(seconds) },
  });
}

export async function test(ctx: RequestContext, id: string): Promise<TestResult> {
  const row = await takeTestTurn(ctx, id);
  const org = await repo.findOrganizationName(ctx.db, ctx.orgId);
  const outcome = await deliverTest(ctx, row, org?.name ?? ctx.orgId);
  if (outcome.status === 'failed') ctx.log.info({ destination_id: id, reason: outcome.detail ?? outcome.error }, 'test message not delivered');
  const at = new Date();
  const updated = await ctx.write(async (w) => {
    const recorded = await repo.recordTest(w.db, ctx.orgId, id, { at, status: outcome.status, error: outcome.error });
    if (!recorded) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { last_test_status: outcome.status } });
    return recorded;
  });
  return { status: outcome.status, error: outcome.error, destination: toDestination(updated) };
}
