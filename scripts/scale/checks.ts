// What the scenarios check after a fault: no acknowledged write lost, none half-written, and every
// acknowledged write's event delivered to the webhook at least once.
import type { Cluster } from './cluster';
import type { AckedWrite, Load } from './load';

export interface WriteCheck {
  /** Acknowledged writes the API no longer shows as written (a created role missing, a deleted one back). */
  lost: string[];
  /** Roles of this load in the database without their audit entry or their event (acknowledged or not). */
  halfWritten: string[];
  /** Roles the load created, acknowledged or not, found in the database. */
  rolesInDatabase: number;
}

/** Every acknowledged write, through the API (the balancer), and the database's invariants directly. */
export async function checkWrites(cluster: Cluster, load: Load, writes: AckedWrite[]): Promise<WriteCheck> {
  const deleted = new Set(writes.filter((w) => w.kind === 'deleted').map((w) => w.roleId));
  const lost: string[] = [];
  // A few at a time: the check must not become a load of its own.
  for (let i = 0; i < writes.length; i += 8) {
    await Promise.all(
      writes.slice(i, i + 8).map(async (w) => {
        const expectGone = deleted.has(w.roleId);
        for (let attempt = 1; ; attempt += 1) {
          const res = await fetch(`${cluster.lbUrl}/role/${w.roleId}`, { headers: cluster.headers, signal: AbortSignal.timeout(30_000) }).catch(() => null);
          if (res && ![502, 503, 504].includes(res.status)) {
            const body = (await res.json()) as { name?: string };
            if (expectGone ? res.status !== 404 : res.status !== 200 || (w.kind === 'created' && body.name !== w.name))
              lost.push(`${w.kind} ${w.roleId}: GET answers ${res.status}`);
            return;
          }
          if (attempt >= 3) return void lost.push(`${w.kind} ${w.roleId}: could not be read back`);
          await new Promise((r) => setTimeout(r, 200));
        }
      }),
    );
  }
  const rows = await cluster.query<{ id: string; audited: boolean; evented: boolean }>(
    `select r.id,
            exists (select 1 from audit_log a where a.target_id = r.id and a.action = 'role.created') as audited,
            exists (select 1 from outbox o where o.event_type = 'role.created' and o.payload::text like '%' || r.id || '%') as evented
       from roles r where r.org_id = $1 and r.name like $2`,
    [cluster.seed.orgId, `${load.prefix}%`],
  );
  const halfWritten = rows
    .filter((r) => !r.audited || !r.evented)
    .map((r) => `${r.id}${r.audited ? '' : ' (no audit entry)'}${r.evented ? '' : ' (no event)'}`);
  // Deleted ones: gone from roles, so their audit entry and event are looked up by id.
  const deletedIds = [...deleted];
  if (deletedIds.length > 0) {
    const gone = await cluster.query<{ id: string; audited: boolean; evented: boolean }>(
      `select t.rid as id,
              exists (select 1 from audit_log a where a.target_id = t.rid and a.action = 'role.deleted') as audited,
              exists (select 1 from outbox o where o.event_type = 'role.deleted' and o.payload::text like '%' || t.rid || '%') as evented
         from unnest($1::text[]) as t(rid)`,
      [deletedIds],
    );
    for (const r of gone)
      if (!r.audited || !r.evented) halfWritten.push(`deleted ${r.id}${r.audited ? '' : ' (no audit entry)'}${r.evented ? '' : ' (no event)'}`);
  }
  return { lost, halfWritten, rolesInDatabase: rows.length };
}

export interface DeliveryCheck {
  expected: number;
  delivered: number;
  missing: number;
  /** Deliveries beyond the first of an event (at least once allows them). */
  duplicates: number;
  /** How long the check waited, from its start (after the load), for the last expected delivery. */
  waitedMs: number;
}

/** Parses what the Slack-type destination posted: each event's type, id and role id. */
export function delivered(cluster: Cluster): { type: string; eventId: string; roleId: string }[] {
  return cluster.receiver.requests
    .filter((r) => r.path === cluster.seed.webhookPath)
    .map((r) => {
      const text = (JSON.parse(r.body) as { text: string }).text;
      const [, type = '', eventId = ''] = /Event: (\S+) \((\S+)\)/.exec(text) ?? [];
      const data = JSON.parse(text.slice(text.indexOf('\n{') + 1)) as { role?: { id?: string } };
      return { type, eventId, roleId: data.role?.id ?? '' };
    });
}

/**
 * Waits (at most `timeoutMs`) until each acknowledged write's event reached the webhook. The
 * default outlasts the delivery lease (60 s, src/events/delivery-queue.ts): what a killed
 * replica had claimed is sent by another once the lease expires.
 */
export async function checkDeliveries(cluster: Cluster, writes: AckedWrite[], timeoutMs = 90_000): Promise<DeliveryCheck> {
  const want = writes.map((w) => `${w.kind === 'created' ? 'role.created' : 'role.deleted'} ${w.roleId}`);
  const start = Date.now();
  for (;;) {
    const got = delivered(cluster);
    const seen = new Set(got.map((d) => `${d.type} ${d.roleId}`));
    const missing = want.filter((k) => !seen.has(k)).length;
    if (missing === 0 || Date.now() - start > timeoutMs) {
      const byEvent = new Map<string, number>();
      for (const d of got) byEvent.set(d.eventId, (byEvent.get(d.eventId) ?? 0) + 1);
      const duplicates = [...byEvent.values()].reduce((sum, n) => sum + n - 1, 0);
      return { expected: want.length, delivered: want.length - missing, missing, duplicates, waitedMs: Date.now() - start };
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}
