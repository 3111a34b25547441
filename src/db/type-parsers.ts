import pg from 'pg';

// pg turns every timestamptz and text[] field of every row into a Date or an array with
// general parsers (a regular expression per timestamp, a character-by-character array
// reader): on a list page of 50 rows they took an eighth of the server's CPU. The shapes
// PostgreSQL sends us are narrow — timestamps in UTC (the pool sets TimeZone=UTC) and arrays
// of identifiers — so those are read directly, and anything else goes to pg's own parser.

// text[] has no name among pg's builtins (those are the element types).
const TEXT_ARRAY = 1009 as (typeof pg.types.builtins)['TEXT'];

/** pg's own parsers, which the readers below defer to for the shapes they do not read. */
export const generalTimestamptz = pg.types.getTypeParser(pg.types.builtins.TIMESTAMPTZ, 'text') as (text: string) => Date | number | null;
export const generalTextArray = pg.types.getTypeParser(TEXT_ARRAY, 'text') as (text: string) => (string | null)[] | null;

const ZERO = 48;

/** The number written by the ASCII digits text[from, to), or NaN when one is not a digit. */
function digits(text: string, from: number, to: number): number {
  let value = 0;
  for (let i = from; i < to; i++) {
    const digit = text.charCodeAt(i) - ZERO;
    if (digit < 0 || digit > 9) return Number.NaN;
    value = value * 10 + digit;
  }
  return value;
}

/**
 * `2026-11-27 20:18:13.123456+00` (DateStyle ISO, TimeZone UTC; 0 to 6 fraction digits) as a
 * Date truncated to the millisecond, as pg's parser makes it. Other offsets, years before
 * 1000 or after 9999, BC and ±infinity are left to pg's parser.
 */
export function parseTimestamptz(text: string): Date | number | null {
  const length = text.length;
  if (
    length >= 22 &&
    length <= 29 &&
    length !== 23 &&
    text.charCodeAt(length - 3) === 43 && // +
    text.charCodeAt(length - 2) === ZERO &&
    text.charCodeAt(length - 1) === ZERO &&
    text.charCodeAt(4) === 45 && // -
    text.charCodeAt(7) === 45 &&
    text.charCodeAt(10) === 32 && // space
    text.charCodeAt(13) === 58 && // :
    text.charCodeAt(16) === 58 &&
    (length === 22 || text.charCodeAt(19) === 46) // .
  ) {
    const year = digits(text, 0, 4);
    let millis = 0;
    if (length > 22) {
      const fraction = length - 23; // digits between the '.' and '+00'
      millis = digits(text, 20, 20 + Math.min(fraction, 3)) * 10 ** Math.max(0, 3 - fraction);
    }
    const time = Date.UTC(year, digits(text, 5, 7) - 1, digits(text, 8, 10), digits(text, 11, 13), digits(text, 14, 16), digits(text, 17, 19), millis);
    if (year >= 1000 && Number.isFinite(time)) return new Date(time);
  }
  return generalTimestamptz(text);
}

/**
 * `{a,b,c}` with no quoted, escaped or nested element as its elements (an unquoted NULL is
 * null, as PostgreSQL writes it); anything else is left to pg's array reader.
 */
export function parseTextArray(text: string): (string | null)[] | null {
  const length = text.length;
  if (length >= 2 && text.charCodeAt(0) === 123 && text.charCodeAt(length - 1) === 125) {
    if (length === 2) return [];
    const inner = text.slice(1, -1);
    if (!/["\\{}]/.test(inner)) {
      const elements: (string | null)[] = inner.split(',');
      for (let i = 0; i < elements.length; i++) if (elements[i] === 'NULL') elements[i] = null;
      return elements;
    }
  }
  return generalTextArray(text);
}

/** Installs the parsers above for every pg client of this process. */
export function useFastTypeParsers(): void {
  pg.types.setTypeParser(pg.types.builtins.TIMESTAMPTZ, parseTimestamptz);
  pg.types.setTypeParser(TEXT_ARRAY, parseTextArray);
}
