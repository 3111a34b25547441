import type { OutboundPolicy } from '../lib/outbound';
import { OutboundRefused, postJson } from '../lib/outbound';
import type { EmailMessage, Mailer } from './email';

export type DeliveryOutcome = { status: 'ok'; error: null } | { status: 'failed'; error: string };

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
    return { status: 'failed', error: `The webhook answered ${res.status} ${res.statusText}.`.replace(/ \.$/, '.') };
  } catch (err) {
    return { status: 'failed', error: describeFailure(err) };
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
