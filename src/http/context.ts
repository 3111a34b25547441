import type { Logger } from 'pino';
import type { Transaction } from 'kysely';
import type { OperationId, OperationMeta } from '../../generated/operations';
import type { Caller, OrgAccess } from '../auth/credentials';
import type { Config } from '../config';
import type { Db } from '../db/database';
import type { Database } from '../db/schema';
import type { EventType } from '../events/catalog';
import type { Mailer } from '../events/email';
import type { SecretBox } from '../lib/crypto';
import { newId } from '../lib/ids';

/** Long-lived collaborators every request may use; built once per process. */
export interface AppDeps {
  config: Config;
  db: Db;
  secrets: SecretBox;
  mailer: Mailer;
  logger: Logger;
  /** The pg pool when on a PostgreSQL server; null on the embedded database. */
  pool?: import('pg').Pool | null;
}

export interface AuditDetails {
  /** Defaults to the resource named by the operation's x-audit action (`team.created` → `team`). */
  targetType?: string;
  targetId: string | null;
  /** What changed, by member name. Never secrets. */
  changes?: Record<string, unknown>;
}

/** The transaction a write runs in, with the audit entry and events that commit with it. */
export class WriteScope {
  auditDetails: AuditDetails | null = null;
  readonly events: { type: EventType; payload: Record<string, unknown> }[] = [];

  constructor(readonly db: Transaction<Database>) {}

  audit(details: AuditDetails): void {
    this.auditDetails = details;
  }

  emit(type: EventType, payload: Record<string, unknown>): void {
    this.events.push({ type, payload });
  }
}

export class RequestContext {
  wrote = false;

  constructor(
    readonly deps: AppDeps,
    readonly operationId: OperationId,
    readonly operation: OperationMeta,
    readonly requestId: string,
    readonly log: Logger,
    readonly caller: Caller | null,
    readonly org: OrgAccess | null,
    readonly client: { ip: string | null; userAgent: string | null },
  ) {}

  get db(): Db {
    return this.deps.db;
  }

  /** The organization of an org-scoped operation. */
  get orgId(): string {
    if (!this.org) throw new Error(`${this.operationId} is not org-scoped; it has no organization.`);
    return this.org.orgId;
  }

  get user(): string {
    if (!this.caller) throw new Error(`${this.operationId} has no authenticated caller.`);
    return this.caller.userId;
  }

  /**
   * Runs a change in one transaction together with its audit entry (the operation's
   * x-audit action) and its outbox events: all commit or none does. Outbound calls belong
   * before or after it, never inside.
   */
  async write<T>(change: (scope: WriteScope) => Promise<T>): Promise<T> {
    const action = this.operation.audit;
    if (!action) throw new Error(`${this.operationId} declares no x-audit; it cannot write.`);
    const result = await this.db.transaction().execute(async (trx) => {
      const scope = new WriteScope(trx);
      const value = await change(scope);
      const details = scope.auditDetails ?? { targetId: null };
      const caller = this.caller;
      await trx
        .insertInto('audit_log')
        .values({
          id: newId('auditEvent'),
          org_id: this.org?.orgId ?? null,
          actor_type: caller ? (caller.kind === 'api_token' ? 'api_token' : 'user') : 'system',
          actor_id: caller ? (caller.kind === 'api_token' ? caller.tokenId : caller.userId) : null,
          actor_user_id: caller?.userId ?? null,
          action,
          target_type: details.targetType ?? action.slice(0, action.indexOf('.')),
          target_id: details.targetId,
          changes: JSON.stringify(details.changes ?? {}),
          ip: this.client.ip,
          user_agent: this.client.userAgent,
          request_id: this.requestId,
        })
        .execute();
      if (scope.events.length > 0) {
        const orgId = this.orgId;
        await trx
          .insertInto('outbox')
          .values(scope.events.map((e) => ({
            id: newId('outboxEvent'),
            org_id: orgId,
            event_type: e.type,
            payload: JSON.stringify(e.payload),
            // An API token acts for its owner: the event names the person.
            actor_type: caller ? 'user' : 'system',
            actor_id: caller?.userId ?? null,
          })))
          .execute();
      }
      return value;
    });
    this.wrote = true;
    return result;
  }
}
