import { createHash } from 'node:crypto';
import { isId, type IdKind } from '../lib/ids';
import { ApiError } from './errors';

export interface PageRequest {
  limit: number;
  /** The id after which the page starts; undefined for the first page. */
  after: string | undefined;
}

export interface Page<T> {
  data: T[];
  next_cursor: string | null;
}

export const DEFAULT_LIMIT = 50;

/**
 * Cursors are opaque to clients: base64url of the last id of the previous page. Decoding
 * checks that it names an id of the listed kind, so a cursor from another list is refused.
 */
export function pageRequest(query: { limit?: number; cursor?: string }, kind: IdKind): PageRequest {
  const limit = query.limit ?? DEFAULT_LIMIT;
  if (query.cursor === undefined) return { limit, after: undefined };
  const after = Buffer.from(query.cursor, 'base64url').toString('utf8');
  if (!isId(kind, after)) throw new ApiError('invalid_cursor', 'The cursor does not belong to this list; start again without it.');
  return { limit, after };
}

/** The cursor of the page that starts after the row `id`. */
export function cursorAfter(id: string): string {
  return Buffer.from(id, 'utf8').toString('base64url');
}

/** Rows fetched with `limit + 1`: the extra row only tells whether another page exists. */
export function toPage<R extends { id: string }, T>(rows: R[], request: PageRequest, map: (row: R) => T): Page<T> {
  const more = rows.length > request.limit;
  const pageRows = more ? rows.slice(0, request.limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return {
    data: pageRows.map(map),
    next_cursor: more && last ? cursorAfter(last.id) : null,
  };
}

/**
 * A page request over a list ordered by another key than an id (an upstream's tools by
 * name): the cursor is the last key of the previous page, checked by `valid`.
 */
export function keyedPageRequest(query: { limit?: number; cursor?: string }, valid: (key: string) => boolean): PageRequest {
  const limit = query.limit ?? DEFAULT_LIMIT;
  if (query.cursor === undefined) return { limit, after: undefined };
  const after = Buffer.from(query.cursor, 'base64url').toString('utf8');
  // A cursor is only ever one this server wrote: it must encode back to itself.
  if (after === '' || cursorAfter(after) !== query.cursor || !valid(after))
    throw new ApiError('invalid_cursor', 'The cursor does not belong to this list; start again without it.');
  return { limit, after };
}

/** A page of a list held in memory, sorted by `key` (byte order, as the database sorts ids). */
export function pageOfSorted<T>(items: readonly T[], key: (item: T) => string, request: PageRequest): Page<T> {
  const after = request.after;
  const rest = after === undefined ? items : items.filter((item) => key(item) > after);
  const pageItems = rest.slice(0, request.limit);
  const last = pageItems[pageItems.length - 1];
  return { data: pageItems, next_cursor: rest.length > request.limit && last ? cursorAfter(key(last)) : null };
}

/**
 * A page request over a filtered list whose cursor must be used with the same filters: the
 * cursor holds the last id and a fingerprint of the filters (400 `invalid_cursor` when they
 * differ, or when it is not a cursor of this list).
 */
export function filteredPageRequest(
  query: { limit?: number; cursor?: string },
  kind: IdKind,
  filters: Record<string, unknown>,
): PageRequest & { fingerprint: string } {
  const fingerprint = filterFingerprint(filters);
  const limit = query.limit ?? DEFAULT_LIMIT;
  if (query.cursor === undefined) return { limit, after: undefined, fingerprint };
  const [after, print] = Buffer.from(query.cursor, 'base64url').toString('utf8').split('~');
  if (after === undefined || !isId(kind, after) || print !== fingerprint) {
    throw new ApiError('invalid_cursor', 'The cursor does not belong to this list with these filters; start again without it.');
  }
  return { limit, after, fingerprint };
}

function filterFingerprint(filters: Record<string, unknown>): string {
  const defined = Object.keys(filters)
    .sort()
    .filter((k) => filters[k] !== undefined)
    .map((k) => [k, filters[k]]);
  return createHash('sha256').update(JSON.stringify(defined)).digest('base64url').slice(0, 12);
}

/** The cursor of the page after the row `id` of a list with these filters (what filteredPageRequest reads). */
export function filteredCursorAfter(id: string, filters: Record<string, unknown>): string {
  return Buffer.from(`${id}~${filterFingerprint(filters)}`, 'utf8').toString('base64url');
}

/** `toPage` for a filteredPageRequest: the next cursor carries the filters' fingerprint. */
export function toFilteredPage<R extends { id: string }, T>(rows: R[], request: PageRequest & { fingerprint: string }, map: (row: R) => T): Page<T> {
  const page = toPage(rows, request, map);
  const last = rows[Math.min(rows.length, request.limit) - 1];
  return { data: page.data, next_cursor: page.next_cursor && last ? Buffer.from(`${last.id}~${request.fingerprint}`, 'utf8').toString('base64url') : null };
}
