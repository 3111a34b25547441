import type { OutboundPolicy } from '../outbound/client';
import { OutboundRefused, postJson } from '../outbound/client';
import type { SecretBox } from '../lib/crypto';
import type { EmailMessage, Mailer } from './email';

/** `error` is what the customer sees (the delivery log, a test's answer); `detail`, when there is more, is for the operator's log only. */
export type DeliveryOutcome = { status: 'ok'; error: null } | { status: 'failed'; error: string; detail?: string };

const ok: DeliveryOutcome = { status: 'ok', error: null };

/** A reason a person can act on, without the URL (a webhook URL is itself a secret). */
function describeFailure(err: unknown): string {
  if (err instanceof OutboundRefused) return err.message;
  const e = err as { code?: string; message?: string; responseCode?: number; response?: string };
  if (e?.responseCode) return `The mail server refused the message: ${e.responseCode} ${(e.response ?? '').slice(0, 200)}`.trim();
  if (e?.code === 'ECONNREFUSED') return 'The connection was refused.';
  if (e?.code === 'ENOTFOUND' || e?.code === 'EAI_AGAIN') return 'The host name does not resolve.';
  if (e?.code === 'ETIMEDOUT' || e?.code === 'ECONNRESET') return 'The connection timed out or was reset.';
  if (e?.code) return `Delivery failed (${e.code}).`;
  return 'Delivery failed.';
}

export async function sendSlackMessage(webhookUrl: string, text: string, policy: OutboundPolicy, timeoutMs: number): Promise<DeliveryOutcome> {
  try {
    const res = await postJson(webhookUrl, { text }, policy, timeoutMs);
    if (res.status >= 200 && res.status < 300) return ok;
    // The status code only: the remote's status line and body are its words, not ours to repeat.
    return {
      status: 'failed',
      error: `The webhook answered with HTTP status ${res.status}.`,
      detail: `webhook answered ${res.status}: ${res.body.slice(0, 300)}`,
    };
  } catch (err) {
    return { status: 'failed', error: describeFailure(err), detail: err instanceof OutboundRefused ? err.detail : undefined };
  }
}

export async function sendEmailMessage(mailer: Mailer, message: EmailMessage): Promise<DeliveryOutcome> {
  try {
    await mailer.send(message);
    return ok;
  } catch (err) {
    return { status: 'failed', error: describeFailure(err) };
  }
}

/** The encryption context binds a stored webhook URL to its destination. */
export const webhookUrlContext = (destinationId: string) => `notification_destinations.webhook_url:${destinationId}`;

/** What a notification destination keeps in its `config` column (the webhook URL is sealed apart). */
export interface DestinationConfig {
  to: string[];
  cc: string[];
  bcc: string[];
  subject_prefix: string | null;
}

export interface DestinationTarget {
  id: string;
  type: 'slack' | 'email';
  config: DestinationConfig;
  webhook_url_enc: string | null;
}

export interface SendingDeps {
  mailer: Mailer;
  secrets: SecretBox;
  outbound: OutboundPolicy & { timeoutMs: number };
}

/** One message to one destination: Slack gets `subject` and `text` as one post, email gets both. */
export async function sendToDestination(deps: SendingDeps, target: DestinationTarget, message: { subject: string; text: string }): Promise<DeliveryOutcome> {
  const prefix = target.config.subject_prefix ? `${target.config.subject_prefix} ` : '';
  if (target.type === 'email') {
    return sendEmailMessage(deps.mailer, {
      to: target.config.to,
      cc: target.config.cc,
      bcc: target.config.bcc,
      subject: `${prefix}${message.subject}`,
      text: message.text,
    });
  }
  if (!target.webhook_url_enc) return { status: 'failed', error: 'No webhook URL is stored; set config.webhook_url.' };
  let url: string;
  try {
    url = deps.secrets.open(target.webhook_url_enc, webhookUrlContext(target.id));
  } catch {
    return { status: 'failed', error: 'The stored webhook URL cannot be decrypted (was ENCRYPTION_KEY changed?); set config.webhook_url again.' };
  }
  return sendSlackMessage(url, `${prefix}*${message.subject}*\n${message.text}`, deps.outbound, deps.outbound.timeoutMs);
}
