import type { Logger } from 'pino';
import type { Executor } from '../db/database';
import type { Mailer } from '../events/email';
import { newId } from '../lib/ids';
import { insertAuditEntries } from '../events/records';

export type SecurityEventType = 'signed_in' | 'second_factor_failed' | 'factor_added' | 'factor_removed' | 'recovery_code_used' | 'recovery_codes_regenerated';

/** Events that change how the account is protected: the person is told by email, in case it was not them. */
const TOLD_BY_EMAIL: ReadonlySet<SecurityEventType> = new Set(['factor_added', 'factor_removed', 'recovery_codes_regenerated']);

const WHAT: Record<SecurityEventType, (method: string | null) => string> = {
  signed_in: (m) => `signed in${m ? ` (${m.replace(/_/g, ' ')})` : ''}`,
  second_factor_failed: (m) => `a wrong second factor was given${m ? ` (${m.replace(/_/g, ' ')})` : ''}`,
  factor_added: (m) => `${m === 'passkey' ? 'a passkey was' : 'an authenticator app was'} added`,
  factor_removed: (m) => `${m === 'passkey' ? 'a passkey was' : 'the authenticator app was'} removed`,
  recovery_code_used: () => 'a recovery code was used',
  recovery_codes_regenerated: () => 'new recovery codes were made (the old ones no longer work)',
};

export interface SecurityEventInput {
  userId: string;
  type: SecurityEventType;
  method?: string | null;
  client: { ip?: string | null; userAgent?: string | null; requestId?: string | null };
}

/**
 * Records a security event where the person (their security log) and the administrators of
 * every organization they are an active member of (its audit log: `member.<type>`, target the
 * member) can see it. In the caller's transaction, so it stands or falls with the change.
 */
export async function recordSecurityEvent(db: Executor, event: SecurityEventInput, now = new Date()): Promise<void> {
  const method = event.method ?? null;
  await db
    .insertInto('security_events')
    .values({
      id: newId('securityEvent'),
      user_id: event.userId,
      type: event.type,
      method,
      ip: event.client.ip ?? null,
      user_agent: event.client.userAgent ?? null,
      created_at: now,
    })
    .execute();
  const organizations = await db.selectFrom('memberships').select('org_id').where('user_id', '=', event.userId).where('status', '=', 'active').execute();
  if (organizations.length === 0) return;
  await insertAuditEntries(
    db,
    organizations.map(({ org_id }) => ({
      id: newId('auditEvent'),
      org_id,
      actor_type: 'user' as const,
      actor_id: event.userId,
      actor_user_id: event.userId,
      action: `member.${event.type}`,
      target_type: 'member',
      target_id: event.userId,
      changes: JSON.stringify(method ? { method } : {}),
      ip: event.client.ip ?? null,
      user_agent: event.client.userAgent ?? null,
      request_id: event.client.requestId ?? null,
      created_at: now,
    })),
  );
}

/**
 * Tells the person by email of a change to how their account is protected (after the change
 * committed; a failure to send is logged, the change stands).
 */
export async function tellPerson(db: Executor, mailer: Mailer, log: Logger, event: SecurityEventInput): Promise<void> {
  if (!TOLD_BY_EMAIL.has(event.type)) return;
  const user = await db.selectFrom('users').select('email').where('id', '=', event.userId).executeTakeFirst();
  if (!user) return;
  const what = WHAT[event.type](event.method ?? null);
  const text = [
    `On your MCP control plane account, ${what}.`,
    '',
    `When: ${new Date().toISOString()}${event.client.ip ? `, from ${event.client.ip}` : ''}.`,
    '',
    'If this was you, nothing more is needed. If it was not, sign in, review your passkeys and authenticator app, and make new recovery codes.',
  ].join('\n');
  try {
    await mailer.send({ to: [user.email], subject: 'Your account’s sign-in protection changed', text });
  } catch (err) {
    log.warn({ err: (err as Error).message, type: event.type }, 'security email not sent');
  }
}
