// A PATCH applier (RFC 7644 §3.5.2) for the attributes this service keeps, lenient in the
// ways Okta and Microsoft Entra ID need: `op` in any case, path-less value objects whose keys
// are paths, `"True"`/`"False"`, `emails[type eq "work"].value` replaced when no such email
// exists yet (Entra: an add, not `noTarget`), and `members` add / remove / replace. It works on
// a copy: the caller stores the result only when every operation applied (all or nothing).
import { parse, type Filter } from 'scim2-parse-filter';
import { booleanOf, invalidValue, ScimError } from './wire';

export type Resource = Record<string, unknown>;
type Op = 'add' | 'replace' | 'remove';

const URN = /^urn:ietf:params:scim:schemas:core:2\.0:(User|Group):/i;
const PATH = /^([A-Za-z$][\w$-]*)(?:\[(.+)\])?(?:\.([A-Za-z$][\w$-]*))?$/;
/** Read-only attributes a client may echo back (Okta's group rename sends `id`): ignored, not `mutability`. */
const READ_ONLY = new Set(['id', 'meta', 'schemas', 'groups']);

const invalidPath = (detail: string) => new ScimError(400, detail, 'invalidPath');

interface Target {
  attr: string;
  filter: Filter | null;
  sub: string | null;
}

/** `name` in the resource's own spelling: SCIM attribute names are case-insensitive. */
function canonical(name: string, known: readonly string[]): string | null {
  return known.find((k) => k.toLowerCase() === name.toLowerCase()) ?? null;
}

function targetOf(path: string, known: readonly string[]): Target | null {
  const match = PATH.exec(path.trim().replace(URN, ''));
  if (!match) {
    // Another schema's attribute (the enterprise extension's `…:User:department`): not kept here.
    if (/^urn:/i.test(path.trim())) return null;
    throw invalidPath(`The path "${path}" is not a path this service understands.`);
  }
  const [, name = '', filterText, sub] = match;
  if (READ_ONLY.has(name.toLowerCase())) return null;
  const attr = canonical(name, known);
  if (!attr) return null;
  let filter: Filter | null = null;
  if (filterText !== undefined) {
    try {
      filter = parse(filterText);
    } catch {
      throw invalidPath(`The filter in "${path}" cannot be parsed.`);
    }
  }
  return { attr, filter, sub: sub ?? null };
}

/** Whether one item of a multi-valued attribute matches a value filter (eq / and, compared ignoring case as SCIM's strings are). */
function matches(item: unknown, filter: Filter): boolean {
  if (!item || typeof item !== 'object') return false;
  switch (filter.op) {
    case 'and':
      return filter.filters.every((f) => matches(item, f));
    case 'or':
      return filter.filters.some((f) => matches(item, f));
    case 'eq': {
      const key = Object.keys(item).find((k) => k.toLowerCase() === filter.attrPath.toLowerCase());
      const actual = key === undefined ? undefined : (item as Resource)[key];
      if (typeof actual === 'string' && typeof filter.compValue === 'string') return actual.toLowerCase() === filter.compValue.toLowerCase();
      return actual === filter.compValue;
    }
    default:
      throw invalidPath(`Only eq (and and / or) may select values in a PATCH path; got ${filter.op}.`);
  }
}

/** The members an `eq` filter pins down, to build the item a replace of a missing one adds. */
function seedOf(filter: Filter): Resource {
  if (filter.op === 'eq') return { [filter.attrPath]: filter.compValue };
  if (filter.op === 'and') return Object.assign({}, ...filter.filters.map(seedOf));
  return {};
}

/** The identity of an item of a multi-valued attribute, to avoid duplicates on add. */
const keyOf = (item: unknown) =>
  item && typeof item === 'object' && typeof (item as Resource).value === 'string' ? ((item as Resource).value as string).toLowerCase() : JSON.stringify(item);

function asArray(value: unknown, attr: string): unknown[] {
  if (Array.isArray(value)) return value;
  if (value && typeof value === 'object') return [value];
  throw invalidValue(`${attr} takes an array of objects.`);
}

function apply(resource: Resource, op: Op, target: Target, value: unknown, multi: ReadonlySet<string>): void {
  const { attr, filter, sub } = target;
  const isMulti = multi.has(attr);
  if (filter) {
    if (!isMulti) throw invalidPath(`${attr} is not multi-valued; a [filter] cannot select in it.`);
    const items = Array.isArray(resource[attr]) ? [...(resource[attr] as unknown[])] : [];
    const hit = items.filter((i) => matches(i, filter));
    if (op === 'remove') {
      if (sub) for (const item of hit) delete (item as Resource)[sub];
      resource[attr] = sub ? items : items.filter((i) => !hit.includes(i));
      return;
    }
    if (hit.length === 0) {
      // Entra replaces `emails[type eq "work"].value` on a person without a work address.
      items.push(sub ? { ...seedOf(filter), [sub]: value } : { ...seedOf(filter), ...(value as Resource) });
    } else {
      for (const item of hit) {
        const at = items.indexOf(item);
        items[at] = sub ? { ...(item as Resource), [sub]: value } : { ...(item as Resource), ...(value as Resource) };
      }
    }
    resource[attr] = items;
    return;
  }
  if (sub) {
    const parent = resource[attr];
    if (op === 'remove') {
      if (parent && typeof parent === 'object' && !Array.isArray(parent)) delete (parent as Resource)[sub];
      return;
    }
    if (isMulti) throw invalidPath(`${attr}.${sub} needs a filter to say which ${attr} value it means.`);
    resource[attr] = { ...(parent && typeof parent === 'object' ? (parent as Resource) : {}), [sub]: value };
    return;
  }
  if (op === 'remove') {
    if (isMulti && value !== undefined && value !== null) {
      // `remove` on members with a value array removes those (Entra, Okta).
      const gone = new Set(asArray(value, attr).map(keyOf));
      resource[attr] = ((resource[attr] as unknown[] | undefined) ?? []).filter((i) => !gone.has(keyOf(i)));
    } else {
      delete resource[attr];
    }
    return;
  }
  if (isMulti) {
    const incoming = asArray(value, attr);
    if (op === 'replace') {
      resource[attr] = incoming;
      return;
    }
    const current = (resource[attr] as unknown[] | undefined) ?? [];
    const seen = new Set(current.map(keyOf));
    resource[attr] = [...current, ...incoming.filter((i) => !seen.has(keyOf(i)))];
    return;
  }
  if (value && typeof value === 'object' && !Array.isArray(value) && resource[attr] && typeof resource[attr] === 'object' && op === 'add') {
    // RFC 7644 §3.5.2.1: adding to a complex attribute merges its sub-attributes.
    resource[attr] = { ...(resource[attr] as Resource), ...(value as Resource) };
    return;
  }
  resource[attr] = value;
}

/**
 * Applies a PatchOp's operations in order to a copy of `resource`, whose attributes (the
 * ones this service keeps) are `known`, `multi` of them multi-valued. Attributes it does not
 * keep are ignored, as on POST and PUT. Throws a ScimError on the first operation that cannot
 * apply; nothing is changed then.
 */
export function applyPatch(resource: Resource, body: unknown, known: readonly string[], multi: ReadonlySet<string>): Resource {
  const operations = (body as { Operations?: unknown })?.Operations;
  if (!Array.isArray(operations) || operations.length === 0) throw new ScimError(400, 'A PatchOp needs Operations, a non-empty array.', 'invalidSyntax');
  const out: Resource = structuredClone(resource);
  operations.forEach((raw, i) => {
    if (!raw || typeof raw !== 'object') throw new ScimError(400, `Operations[${i}] is not an object.`, 'invalidSyntax');
    const { op: opText, path, value } = raw as { op?: unknown; path?: unknown; value?: unknown };
    const op = typeof opText === 'string' ? (opText.toLowerCase() as Op) : null;
    if (op !== 'add' && op !== 'replace' && op !== 'remove') throw new ScimError(400, `Operations[${i}].op must be add, replace or remove.`, 'invalidSyntax');
    if (path !== undefined && typeof path !== 'string') throw invalidPath(`Operations[${i}].path must be a string.`);
    if (path === undefined || path === '') {
      if (op === 'remove') throw new ScimError(400, `Operations[${i}]: remove needs a path.`, 'noTarget');
      if (!value || typeof value !== 'object' || Array.isArray(value)) {
        throw invalidValue(`Operations[${i}]: without a path, value must be an object of attributes.`);
      }
      for (const [key, member] of Object.entries(value as Resource)) {
        const target = targetOf(key, known);
        if (target) apply(out, op, target, member, multi);
      }
      return;
    }
    const target = targetOf(path, known);
    if (!target) return;
    if (op !== 'remove' && value === undefined) throw invalidValue(`Operations[${i}]: ${op} needs a value.`);
    apply(out, op, target, value, multi);
  });
  if ('active' in out && out.active !== undefined) out.active = booleanOf(out.active, 'active');
  return out;
}
