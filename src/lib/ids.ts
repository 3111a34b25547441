import { randomFillSync } from 'node:crypto';
import { encodeTime, monotonicFactory } from 'ulid';
import { ID_PREFIXES } from '../../generated/ids';

/**
 * Every resource id is `<prefix>_<ulid>` in lowercase Crockford base32: sortable, so id order
 * is creation order and keyset pagination on the primary key is creation order too.
 * The prefixes come from the spec's `…Id` schemas (generated/ids.ts): an area declares its
 * id once, in its schema file.
 */
export { ID_PREFIXES };

export type IdKind = keyof typeof ID_PREFIXES;

const nextUlid = monotonicFactory();

export function newId(kind: IdKind): string {
  return `${ID_PREFIXES[kind]}_${nextUlid().toLowerCase()}`;
}

/**
 * The least id of a kind minted at `at`: every id minted earlier sorts below it, so "created
 * before" is a range of the primary key (its index), with no index on a timestamp.
 */
export function firstIdAt(kind: IdKind, at: Date): string {
  return `${ID_PREFIXES[kind]}_${encodeTime(at.getTime(), 10).toLowerCase()}${'0'.repeat(16)}`;
}

/** Request ids name requests, not resources, so they are not among the spec's ids. */
const REQUEST_ID_PREFIX = 'req';

const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz';
const randomPool = Buffer.alloc(4096);
let randomOffset = randomPool.length;

/**
 * A request id on every request: the same shape as resource ids, but drawn from a pooled
 * random buffer instead of one getRandomValues call per character (ulid's cost showed in
 * profiles), and without the monotonic guarantee nothing orders request ids by.
 */
export function newRequestId(): string {
  if (randomOffset + 16 > randomPool.length) {
    randomFillSync(randomPool);
    randomOffset = 0;
  }
  let time = Date.now();
  let timePart = '';
  for (let i = 0; i < 10; i += 1) {
    timePart = CROCKFORD[time % 32] + timePart;
    time = Math.floor(time / 32);
  }
  let randomPart = '';
  for (let i = 0; i < 16; i += 1) randomPart += CROCKFORD[randomPool[randomOffset + i]! & 31];
  randomOffset += 16;
  return `${REQUEST_ID_PREFIX}_${timePart}${randomPart}`;
}

const SUFFIX = /^[0-7][0-9a-hjkmnp-tv-z]{25}$/;

export function isId(kind: IdKind, value: string): boolean {
  const prefix = `${ID_PREFIXES[kind]}_`;
  return value.startsWith(prefix) && SUFFIX.test(value.slice(prefix.length));
}
