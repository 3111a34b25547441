// What every SCIM answer shares (RFC 7644): its media type, its error body, weak entity tags,
// list responses and the attributes / excludedAttributes projection.
import { createHash } from 'node:crypto';
import { ApiError } from '../../http/errors';

export const SCIM_MEDIA = 'application/scim+json';
export const ERROR_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:Error';
export const LIST_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:ListResponse';
export const PATCH_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
export const USER_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:User';
export const GROUP_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Group';

export type ScimType = 'invalidFilter' | 'uniqueness' | 'mutability' | 'invalidSyntax' | 'invalidPath' | 'noTarget' | 'invalidValue';

const CODE_OF: Record<number, ApiError['code']> = { 400: 'validation_failed', 404: 'not_found', 409: 'conflict', 412: 'conflict' };

/**
 * A refusal in SCIM's terms: its status (412 has no Error-object code of its own) and its
 * `scimType`. Thrown inside a write, so that nothing of the request is kept.
 */
export class ScimError extends ApiError {
  constructor(
    status: 400 | 404 | 409 | 412,
    detail: string,
    readonly scimType?: ScimType,
  ) {
    super(CODE_OF[status] ?? 'validation_failed', detail);
    (this as { status: number }).status = status;
  }
}

export const invalidValue = (detail: string) => new ScimError(400, detail, 'invalidValue');
export const notFound = (what: 'User' | 'Group', id: string) => new ScimError(404, `No ${what} ${id} in this organization.`);

/** The SCIM error body for any refusal of a SCIM operation (the guard's 401 and 403 included). */
export function errorBody(error: ApiError): { schemas: string[]; status: string; scimType?: ScimType; detail: string } {
  const scimType =
    error instanceof ScimError ? error.scimType : error.code === 'malformed_json' ? 'invalidSyntax' : error.status === 400 ? 'invalidValue' : undefined;
  return { schemas: [ERROR_SCHEMA], status: String(error.status), ...(scimType ? { scimType } : {}), detail: error.detail };
}

/** A weak entity tag of a resource's representation (RFC 7644 §3.14): changes whenever what GET shows changes. */
export function versionOf(resource: unknown): string {
  return `W/"${createHash('sha256').update(JSON.stringify(resource)).digest('base64url').slice(0, 16)}"`;
}

/**
 * `If-Match` with weak comparison (RFC 9110 §8.8.3.2): identity providers send back the weak
 * tag they were given, and SCIM's tags are weak, so a strong comparison would never match.
 */
export function checkIfMatch(header: string | undefined, current: string): void {
  if (header === undefined || header.trim() === '' || header.trim() === '*') return;
  const opaque = (tag: string) => tag.trim().replace(/^W\//, '');
  const wanted = opaque(current);
  if (!header.split(',').some((tag) => opaque(tag) === wanted)) {
    throw new ScimError(412, `The resource changed: its version is now ${current}; read it again and retry.`);
  }
}

/** RFC 7644 §3.4.2.4: below 1 counts as 1; `count` is capped at the maximum, and below 0 counts as 0. */
export function pageOf(query: { startIndex?: unknown; count?: unknown }, max = 200, defaultCount = 100): { startIndex: number; count: number } {
  const start = Number.isInteger(query.startIndex) ? (query.startIndex as number) : 1;
  const count = Number.isInteger(query.count) ? (query.count as number) : defaultCount;
  return { startIndex: Math.max(1, start), count: Math.min(max, Math.max(0, count)) };
}

export function listResponse<T>(total: number, startIndex: number, resources: T[]) {
  return { schemas: [LIST_SCHEMA], totalResults: total, startIndex, itemsPerPage: resources.length, Resources: resources };
}

/**
 * RFC 7644 §3.4.2.5: `attributes` names what to return instead of the default set,
 * `excludedAttributes` what to leave out of it; `id` and `schemas` always stay. A sub-attribute
 * (`name.givenName`) selects its parent partly. Names are compared ignoring case, and may
 * carry the core schema's URN.
 */
export function project<T extends Record<string, unknown>>(resource: T, attributes?: string, excluded?: string): T {
  const names = (list: string) =>
    list
      .split(',')
      .map((n) => n.trim().replace(/^urn:ietf:params:scim:schemas:core:2\.0:(User|Group):/i, ''))
      .filter(Boolean)
      .map((n) => n.toLowerCase());
  const always = new Set(['id', 'schemas']);
  if (attributes) {
    const wanted = names(attributes);
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(resource)) {
      const k = key.toLowerCase();
      if (always.has(k) || wanted.includes(k)) out[key] = value;
      else {
        const subs = wanted.filter((w) => w.startsWith(`${k}.`)).map((w) => w.slice(k.length + 1));
        if (subs.length > 0 && value && typeof value === 'object' && !Array.isArray(value)) {
          out[key] = Object.fromEntries(Object.entries(value).filter(([sub]) => subs.includes(sub.toLowerCase())));
        } else if (subs.length > 0 && Array.isArray(value)) {
          out[key] = value.map((item) =>
            item && typeof item === 'object' ? Object.fromEntries(Object.entries(item).filter(([sub]) => subs.includes(sub.toLowerCase()))) : item,
          );
        }
      }
    }
    return out as T;
  }
  if (excluded) {
    const dropped = new Set(names(excluded));
    return Object.fromEntries(Object.entries(resource).filter(([key]) => always.has(key.toLowerCase()) || !dropped.has(key.toLowerCase()))) as T;
  }
  return resource;
}

/** `true`/`false`, or the strings Microsoft Entra ID sends (`"True"`, `"False"`) in any case. */
export function booleanOf(value: unknown, path: string): boolean {
  if (typeof value === 'boolean') return value;
  if (typeof value === 'string' && /^(true|false)$/i.test(value)) return value.toLowerCase() === 'true';
  throw invalidValue(`${path} must be true or false.`);
}
