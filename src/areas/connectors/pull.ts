import type { components } from '../../../generated/openapi';
import { docValue, MEMBERS, sameJson, type ConnectorContent, type StoredDocumentation, type StoredTool } from './content';

export type FieldChange = components['schemas']['ConnectorFieldChange'];

/**
 * What upstream changed since the fork's base that the fork does not already have, field by
 * field: members, then tools by name, then documentation entries by key. `conflict` where the
 * fork changed the field too since the base. A null base (a version the database never saw)
 * counts every upstream value as added or changed.
 */
export function diffUpstream(base: ConnectorContent | null, upstream: ConnectorContent, local: ConnectorContent): FieldChange[] {
  const changes: FieldChange[] = [];
  const consider = (field: string, b: unknown, u: unknown, l: unknown, compare: (v: unknown) => unknown = (v) => v) => {
    const [cb, cu, cl] = [b, u, l].map((v) => (v === null || v === undefined ? null : compare(v)));
    if (sameJson(cu, cb) || sameJson(cu, cl)) return;
    const kind = b == null ? 'added' : u == null ? 'removed' : 'modified';
    changes.push({ field, kind, upstream_value: u ?? null, local_value: l ?? null, base_value: b ?? null, conflict: !sameJson(cl, cb) });
  };
  for (const member of MEMBERS) consider(member, base ? base[member] : null, upstream[member], local[member]);

  const byName = (tools: readonly StoredTool[] | undefined) => new Map((tools ?? []).map((t) => [t.name, t]));
  const [bt, ut, lt] = [byName(base?.tools), byName(upstream.tools), byName(local.tools)];
  for (const name of [...new Set([...bt.keys(), ...ut.keys(), ...lt.keys()])].sort()) {
    consider(`tools/${name}`, bt.get(name) ?? null, ut.get(name) ?? null, lt.get(name) ?? null);
  }

  const byKey = (docs: readonly StoredDocumentation[] | undefined) => new Map((docs ?? []).map((d) => [d.key, d]));
  const [bd, ud, ld] = [byKey(base?.documentation), byKey(upstream.documentation), byKey(local.documentation)];
  for (const key of [...new Set([...bd.keys(), ...ud.keys(), ...ld.keys()])].sort()) {
    consider(`documentation/${key}`, bd.get(key) ?? null, ud.get(key) ?? null, ld.get(key) ?? null, (v) => docValue(v as StoredDocumentation));
  }
  return changes;
}

/** The fork's content with the named upstream values taken (a tool or entry removed upstream is removed). */
export function takeFields(local: ConnectorContent, upstream: ConnectorContent, fields: readonly string[], now: string): ConnectorContent {
  const next: ConnectorContent = structuredClone(local);
  for (const field of fields) {
    const slash = field.indexOf('/');
    if (slash < 0) {
      const member = field as (typeof MEMBERS)[number];
      (next as unknown as Record<string, unknown>)[member] = structuredClone(upstream[member]);
    } else if (field.startsWith('tools/')) {
      const name = field.slice(slash + 1);
      const taken = upstream.tools.find((t) => t.name === name);
      const at = next.tools.findIndex((t) => t.name === name);
      if (taken && at >= 0) next.tools[at] = structuredClone(taken);
      else if (taken) next.tools.push(structuredClone(taken));
      else if (at >= 0) next.tools.splice(at, 1);
    } else {
      const key = field.slice(slash + 1);
      const taken = upstream.documentation.find((d) => d.key === key);
      const at = next.documentation.findIndex((d) => d.key === key);
      const entry = taken ? { ...structuredClone(taken), updated_at: now } : null;
      if (entry && at >= 0) next.documentation[at] = entry;
      else if (entry) next.documentation.push(entry);
      else if (at >= 0) next.documentation.splice(at, 1);
    }
  }
  return next;
}
