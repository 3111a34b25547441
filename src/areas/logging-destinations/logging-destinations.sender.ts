import http from 'node:http';
import type { SecretBox } from '../../lib/crypto';
import { guardedRequest, keepAliveAgent, OutboundRefused, type OutboundPolicy } from '../../outbound/client';
import {
  encodeEach,
  fitting,
  request,
  verdictOf,
  type DestinationType,
  type ExportRecord,
  type StoredConfig,
  type StoredSecrets,
  type Target,
  type Verdict,
} from './logging-destinations.formats';

/** The encryption context binds a destination's sealed secrets to it. */
export const secretsContext = (destinationId: string) => `logging_destinations.secrets:${destinationId}`;

/** How much of a backend's answer is read: its short JSON reason, or OTLP's partialSuccess. */
const ANSWER_CAP = 65_536;
/** Kept-alive agents, one per origin; past this many the oldest is closed. */
const AGENTS_MAX = 256;

export interface SenderOptions {
  outbound: OutboundPolicy & { timeoutMs: number };
  datadogIntakeUrl: string;
  /** The `host` records are tagged with: this deployment's host name. */
  host: string;
  secrets: SecretBox;
}

export interface StoredDestination {
  id: string;
  type: DestinationType;
  config: StoredConfig;
  secrets_enc: string | null;
}

/**
 * Sends batches of records to logging destinations through the outbound guard, over
 * kept-alive connections per origin. Used by the delivery worker and by `test` alike, so a
 * test record travels exactly as records do.
 */
export class LoggingSender {
  private readonly agents = new Map<string, http.Agent>();

  constructor(private readonly options: SenderOptions) {}

  /** The destination with its secrets opened; a string when they cannot be (the reason). */
  open(row: StoredDestination): Target | string {
    let secrets: StoredSecrets = {};
    if (row.secrets_enc) {
      try {
        secrets = JSON.parse(this.options.secrets.open(row.secrets_enc, secretsContext(row.id))) as StoredSecrets;
      } catch {
        return 'The stored credentials cannot be decrypted (was ENCRYPTION_KEY changed?); set them again.';
      }
    }
    return { id: row.id, type: row.type, config: row.config, secrets };
  }

  /**
   * Sends as many of `records` (in order, at least one) as one request of the destination's
   * type may carry, and says how many that was and what the backend's answer means.
   */
  async send(target: Target, records: readonly ExportRecord[]): Promise<{ sent: number; verdict: Verdict; detail?: string }> {
    const encoded = encodeEach(target, records, this.options.host);
    const sent = fitting(target.type, encoded);
    const req = request(target, encoded.slice(0, sent), this.options.datadogIntakeUrl);
    let url: URL;
    try {
      url = new URL(req.url);
    } catch {
      return { sent, verdict: { kind: 'retry', error: 'The destination has no valid URL; set config.url.', retryAfterMs: null } };
    }
    try {
      const res = await guardedRequest(
        url,
        { method: 'POST', headers: req.headers, body: req.body, agent: this.agentFor(url) },
        { policy: this.options.outbound, timeoutMs: this.options.outbound.timeoutMs, maxBytes: ANSWER_CAP },
      );
      const chunks: Buffer[] = [];
      await res.read((chunk) => chunks.push(chunk));
      const body = Buffer.concat(chunks).toString('utf8');
      return { sent, verdict: verdictOf(target.type, res.status, http.STATUS_CODES[res.status] ?? '', res.headers, body, sent), detail: body.slice(0, 300) };
    } catch (err) {
      const refused = err instanceof OutboundRefused ? err : null;
      return {
        sent,
        verdict: { kind: 'retry', error: refused?.message ?? 'The destination could not be reached from this server.', retryAfterMs: null },
        detail: refused?.detail ?? String(err),
      };
    }
  }

  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }

  private agentFor(url: URL): http.Agent {
    let agent = this.agents.get(url.origin);
    if (!agent) {
      if (this.agents.size >= AGENTS_MAX) {
        const [oldest, first] = this.agents.entries().next().value as [string, http.Agent];
        first.destroy();
        this.agents.delete(oldest);
      }
      agent = keepAliveAgent(url);
      this.agents.set(url.origin, agent);
    }
    return agent;
  }
}
