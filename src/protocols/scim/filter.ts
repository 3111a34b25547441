// The filters identity providers send (RFC 7644 §3.4.2.2), parsed by a real parser and then
// narrowed to what this service answers: `eq` on a few attributes, joined by `and`.
import { parse, type Filter } from 'scim2-parse-filter';
import { ScimError } from './wire';

export interface Condition {
  /** The attribute, as this service names it (lower case, no schema URN). */
  attr: string;
  value: string | boolean;
}

const invalidFilter = (detail: string) => new ScimError(400, detail, 'invalidFilter');

const normalize = (path: string) => path.replace(/^urn:ietf:params:scim:schemas:core:2\.0:(User|Group):/i, '').toLowerCase();

/**
 * The conditions of a filter, all of which must hold; `allowed` lists the attributes (lower
 * case) that may be compared. Anything else (another operator, `or`, `not`, `pr`, another
 * attribute, a value of the wrong type) is 400 `invalidFilter`, never a silently wider match.
 */
export function conditionsOf(filter: string | undefined, allowed: readonly string[]): Condition[] {
  if (filter === undefined || filter.trim() === '') return [];
  let tree: Filter;
  try {
    tree = parse(filter);
  } catch (err) {
    throw invalidFilter(`The filter cannot be parsed: ${(err as Error).message.slice(0, 200)}`);
  }
  const out: Condition[] = [];
  const walk = (node: Filter, prefix: string | null): void => {
    switch (node.op) {
      case 'and':
        for (const child of node.filters) walk(child, prefix);
        return;
      case 'eq': {
        const attr = prefix ? `${prefix}.${normalize(node.attrPath)}` : normalize(node.attrPath);
        if (!allowed.includes(attr)) throw invalidFilter(`Filtering on ${node.attrPath} is not supported; filter with eq on ${allowed.join(', ')}.`);
        const value = node.compValue;
        if (attr === 'active') {
          if (typeof value !== 'boolean') throw invalidFilter('active is compared with true or false.');
        } else if (typeof value !== 'string') {
          throw invalidFilter(`${node.attrPath} is compared with a string.`);
        }
        out.push({ attr, value: value as string | boolean });
        return;
      }
      case '[]':
        if (prefix) throw invalidFilter('Nested value filters are not supported.');
        walk(node.valFilter, normalize(node.attrPath));
        return;
      default:
        throw invalidFilter(`The operator "${node.op}" is not supported; use eq, joined by and.`);
    }
  };
  walk(tree, null);
  return out;
}
