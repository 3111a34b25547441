import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { Transaction } from 'kysely';
import type { Caller, OrgAccess, SessionCaller } from '../identity/credentials';
import type { Config } from '../config';
import type { Db } from '../db/database';
import type { ActorType, Database, EventActorType } from '../db/schema';
import type { EventDataMap, EventType } from '../events/catalog';
import type { Mailer } from '../events/email';
import { appendEvents } from '../events/outbox';
import type { SecretBox } from '../lib/crypto';
import { newId } from '../lib/ids';
import { WrittenTables, type CommittedChange } from '../db/written-tables';
import type { OperationMeta } from '../spec/operations';
import { ApiError } from './errors';
import type { Hooks } from './hooks';
import type { Metrics } from '../lib/metrics';
import type { Tracing } from '../lib/tracing';
import { insertAuditEntries } from '../events/records';

/** Long-lived collaborators the process hands the app (main.ts, the test harness). */
export interface ProcessDeps {
  config: Config;
  db: Db;
  secrets: SecretBox;
  mailer: Mailer;
  logger: Logger;
  /** The pg pool when on a PostgreSQL server; null on the embedded database. */
  pool?: import('pg').Pool | null;
  /**
   * Where committed changes to credentials are heard (DatabaseHandle.listen). Without it no
   * process-wide credential cache is kept: every request asks the database.
   */
  listen?: import('../db/database').DatabaseHandle['listen'];
  /**
   * Called after every write commits, before the response (createApp's caches forget what
   * the change may have altered). Without a change named: it may have changed anything.
   */
  afterCommit?: (change?: CommittedChange) => void;
  /** Told of every event a write commits (the test harness checks them against each operation's x-events). */
  onEvent?: (operationId: string, type: EventType) => void;
}

/**
 * What every request may use: the process's collaborators, and what createApp builds once
 * for the app (the modules' hooks; other parts add theirs by declaration merging, as the MCP
 * runtime adds `mcp`). Closed with the app.
 */
export interface AppDeps extends ProcessDeps {
  hooks: Hooks;
  /** The app's metrics (its own registry: two apps in one process count apart). */
  metrics: Metrics;
  /** The app's traces (its own provider); a no-op unless an OTLP endpoint is configured. */
  tracing: Tracing;
}

export interface AuditDetails {
  /** Defaults to the resource named by the operation's x-audit action (`team.created` → `team`). */
  targetType?: string;
  targetId: string | null;
  /** What changed, by member name. Never secrets. */
  changes?: Record<string, unknown>;
}

/** A secret that changed, as an audit entry shows it (AuditEvent.changes): never its value. */
export const SECRET_CHANGED = { changed: true } as const;

/** What an update's audit entry compares and how it shows members (changedMembers). */
export interface ChangedMembersOptions {
  /** Members shown as `{changed: true}` only, never their value. */
  secrets?: readonly string[];
  /**
   * Large members (tool lists, schemas, steps, entries) shown by a digest of their value
   * (`sha256:…`, null stays null), so that an entry stays small and still tells whether
   * two versions were the same.
   */
  digests?: readonly string[];
}

/** JSON with object members in a fixed order: the same value reads the same however it was built (JSONB reorders keys). */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value ?? null, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** How a large member's value shows in an audit entry: a digest of it, or null. */
export function auditDigest(value: unknown): string | null {
  return value === null || value === undefined ? null : `sha256:${createHash('sha256').update(canonicalJson(value)).digest('hex')}`;
}

/**
 * An update's audit `changes` as AuditEvent.changes defines them: each member of `after`
 * whose value differs from `before`, as `{from, to}` (compared by value: arrays and objects
 * alike, whatever the order of their keys); secrets as `{changed: true}` only, large members
 * by digest. Every update of every area records its changes through this one function.
 */
export function changedMembers(before: Record<string, unknown>, after: Record<string, unknown>, options: ChangedMembersOptions = {}): Record<string, unknown> {
  const changes: Record<string, unknown> = {};
  for (const [name, to] of Object.entries(after)) {
    if (to === undefined) continue;
    const from = before[name];
    if (canonicalJson(from) === canonicalJson(to)) continue;
    if (options.secrets?.includes(name)) changes[name] = SECRET_CHANGED;
    else if (options.digests?.includes(name)) changes[name] = { from: auditDigest(from), to: auditDigest(to) };
    else changes[name] = { from: from ?? null, to };
  }
  return changes;
}

/** Who an audit entry names for a caller: the credential itself, and the person it acts for. */
function auditActor(caller: Caller | null): { actor_type: ActorType; actor_id: string | null; actor_user_id: string | null } {
  if (!caller) return { actor_type: 'system', actor_id: null, actor_user_id: null };
  switch (caller.kind) {
    case 'api_token':
      return { actor_type: 'api_token', actor_id: caller.tokenId, actor_user_id: caller.userId };
    case 'session':
      return { actor_type: 'user', actor_id: caller.userId, actor_user_id: caller.userId };
    case 'scim_token':
      return { actor_type: 'scim', actor_id: caller.tokenId, actor_user_id: null };
    case 'mcp_client':
      return { actor_type: 'mcp_client', actor_id: caller.clientId ?? caller.mcpServerId, actor_user_id: caller.userId };
    case 'oauth_client':
      return { actor_type: 'mcp_client', actor_id: caller.clientId, actor_user_id: null };
  }
}

/** Who an event names: a person (whatever credential acted for them), the identity provider, or the system. */
function eventActor(caller: Caller | null): { actor_type: EventActorType; actor_id: string | null } {
  if (!caller) return { actor_type: 'system', actor_id: null };
  if (caller.kind === 'scim_token') return { actor_type: 'scim', actor_id: null };
  return { actor_type: 'user', actor_id: caller.userId };
}

/** The transaction a write runs in, with the audit entry and events that commit with it. */
export class WriteScope {
  auditDetails: AuditDetails | null = null;
  readonly events: { type: EventType; data: unknown }[] = [];

  constructor(
    readonly db: Transaction<Database>,
    private readonly operationId: string,
    private readonly declaredEvents: readonly string[],
  ) {}

  audit(details: AuditDetails): void {
    this.auditDetails = details;
  }

  /** An event with the data its schema in the spec defines; the operation must declare it in x-events. */
  emit<T extends EventType>(type: T, data: EventDataMap[T]): void {
    if (!this.declaredEvents.includes(type)) {
      throw new Error(`${this.operationId} emits ${type}, which its x-events in the spec does not declare.`);
    }
    this.events.push({ type, data });
  }
}

/** How long the client waits for the response: what handlers stop for when it goes away. */
export interface ClientPresence {
  /** Aborted when the client goes away before the response is complete (made on first use). */
  signal(): AbortSignal;
  /** Calls `listener` once if the client goes away before the response is complete; the function returned stops listening. */
  onGone(listener: () => void): () => void;
}

export class RequestContext {
  wrote = false;
  private logger: Logger | (() => Logger);

  constructor(
    readonly deps: AppDeps,
    readonly operationId: string,
    readonly operation: OperationMeta,
    readonly requestId: string,
    /** The request's logger (or, made on first use, a function: most requests never log). */
    log: Logger | (() => Logger),
    readonly caller: Caller | null,
    /** The organization the request acts in: named by X-Organization-Id, or the one the credential is bound to. */
    private acting: OrgAccess | null,
    readonly client: {
      ip: string | null;
      userAgent: string | null;
      /** `Accept` as sent (protocols that negotiate on it: the MCP endpoint). */
      accept?: string | null;
      /** The body's media type, without parameters: a browser's form and a client's JSON may get different answers. */
      media?: string | null;
      /** The session cookie as sent, authenticated or not: a sign-in ends the session this browser had. */
      sessionCookie?: string | null;
      /** The Cookie header as sent (a sign-in flow's own cookie, `cp_auth_flow`, is read from it). */
      cookies?: string | null;
    },
    private readonly presence: ClientPresence,
  ) {
    this.logger = log;
  }

  /** The request's logger: every line carries its request id. */
  get log(): Logger {
    if (typeof this.logger === 'function') this.logger = this.logger();
    return this.logger;
  }

  /** Aborted when the client goes away before the response is complete: stop upstream work. */
  get signal(): AbortSignal {
    return this.presence.signal();
  }

  /**
   * Calls `listener` once if the client goes away before the response is complete, without
   * making a signal (for a handler that aborts a controller of its own); the function
   * returned stops listening.
   */
  whenGone(listener: () => void): () => void {
    return this.presence.onGone(listener);
  }

  get db(): Db {
    return this.deps.db;
  }

  /** The organization the request acts in, and the caller's standing there. */
  get org(): OrgAccess | null {
    return this.acting;
  }

  /**
   * For an operation outside any organization whose resource names one (a connection's
   * OAuth callback, reached by a browser without X-Organization-Id): once the handler has
   * checked the caller's standing there as the guard would, the request acts in it, so that
   * its writes are that organization's (audit entry, events).
   */
  actIn(org: OrgAccess): void {
    if (this.acting && this.acting.orgId !== org.orgId) throw new Error(`${this.operationId} already acts in ${this.acting.orgId}.`);
    this.acting = org;
  }

  /** The organization of an org-scoped operation, or of an organization-bound credential. */
  get orgId(): string {
    if (!this.org) throw new Error(`${this.operationId} acts in no organization.`);
    return this.org.orgId;
  }

  /** The authenticated caller of an operation that requires one. */
  get authenticated(): Caller {
    if (!this.caller) throw new Error(`${this.operationId} has no authenticated caller.`);
    return this.caller;
  }

  /**
   * The signed-in person of an operation for people only (its security takes a session):
   * anything else is 403 requires_person.
   */
  get person(): SessionCaller {
    const caller = this.authenticated;
    if (caller.kind !== 'session') throw new ApiError('requires_person', 'This is for a person signed in to the web app.');
    return caller;
  }

  /** What an audit entry or security event records of the request. */
  get trace(): { ip: string | null; userAgent: string | null; requestId: string } {
    return { ip: this.client.ip, userAgent: this.client.userAgent, requestId: this.requestId };
  }

  /** The person the caller acts for. */
  get user(): string {
    const userId = this.authenticated.userId;
    if (!userId) throw new Error(`${this.operationId}: a ${this.authenticated.kind} acts for no person.`);
    return userId;
  }

  /**
   * Runs a change in one transaction together with its audit entry (the operation's
   * x-audit action) and its outbox events: all commit or none does. Outbound calls belong
   * before or after it, never inside.
   */
  async write<T>(change: (scope: WriteScope) => Promise<T>): Promise<T> {
    const action = this.operation.audit;
    if (!action) throw new Error(`${this.operationId} declares no x-audit; it cannot write.`);
    const result = await this.commit(
      change,
      (trx, details) => this.appendAudit(trx, action, auditActor(this.caller), details ?? { targetId: null }),
      eventActor(this.caller),
    );
    this.wrote = true;
    return result;
  }

  private async appendAudit(trx: Transaction<Database>, action: string, actor: ReturnType<typeof auditActor>, details: AuditDetails): Promise<void> {
    await insertAuditEntries(trx, {
      id: newId('auditEvent'),
      org_id: this.org?.orgId ?? null,
      ...actor,
      action,
      target_type: details.targetType ?? action.slice(0, action.indexOf('.')),
      target_id: details.targetId,
      changes: JSON.stringify(details.changes ?? {}),
      ip: this.client.ip,
      user_agent: this.client.userAgent,
      request_id: this.requestId,
    });
  }

  /**
   * A write operation that found nothing to change (adding what is already there, answered
   * 200 with the existing entry): no transaction and no audit entry, as its spec says. The
   * router otherwise refuses a successful write that did not go through write().
   */
  unchanged(): void {
    this.wrote = true;
  }

  /**
   * A change the server makes on its own account while serving the request, not the
   * caller's (a connection found to need re-authorization when the upstream refused its
   * credentials): its events (still declared in x-events) name the system as their actor.
   * No audit entry, unless `auditAction` is given and the change called `audit()`: then an
   * entry of that action with the actor `system` (what an outside party reported, such as a
   * subscription the payment provider changed, that moves what the organization may do).
   */
  systemWrite<T>(change: (scope: WriteScope) => Promise<T>, auditAction?: string): Promise<T> {
    const system = { actor_type: 'system', actor_id: null, actor_user_id: null } as const;
    return this.commit(
      change,
      async (trx, details) => {
        if (auditAction && details) await this.appendAudit(trx, auditAction, system, details);
      },
      { actor_type: 'system', actor_id: null },
    );
  }

  /**
   * A change that belongs to a person, not to an organization: the sign-in flows' sessions
   * and emailed links, whose operations declare `x-audit: null`. One transaction, and what
   * this process remembers of the tables it wrote (a session it authenticated) is forgotten
   * before the response leaves.
   */
  personalWrite<T>(change: (db: Transaction<Database>) => Promise<T>): Promise<T> {
    return this.commit(
      (scope) => change(scope.db),
      async () => undefined,
      eventActor(this.caller),
    );
  }

  private async commit<T>(
    change: (scope: WriteScope) => Promise<T>,
    audit: (trx: Transaction<Database>, details: AuditDetails | null) => Promise<void>,
    actor: { actor_type: EventActorType; actor_id: string | null },
  ): Promise<T> {
    let events: WriteScope['events'] = [];
    const written = new WrittenTables();
    const result = await this.db
      .withPlugin(written)
      .transaction()
      .execute(async (trx) => {
        const scope = new WriteScope(trx, this.operationId, this.operation.events);
        const value = await change(scope);
        await audit(trx, scope.auditDetails);
        if (scope.events.length > 0) await appendEvents(trx, this.orgId, scope.events, actor);
        events = scope.events;
        return value;
      });
    // The acting organization's data is what a request changes (tenant isolation); a write
    // outside any organization may have changed any organization's.
    this.deps.afterCommit?.({ scope: this.org?.orgId ?? '', tables: written.tables });
    for (const event of events) this.deps.onEvent?.(this.operationId, event.type);
    return result;
  }
}
