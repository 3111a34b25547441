// The direct readers of timestamptz and text[] must give what pg's general parsers give, for
// every shape PostgreSQL writes; shapes they do not read are handed to the general ones.
import { generalTextArray, generalTimestamptz, parseTextArray, parseTimestamptz } from '../../src/db/type-parsers';

const same = (a: unknown, b: unknown) => expect(a instanceof Date ? a.getTime() : a).toEqual(b instanceof Date ? b.getTime() : b);

describe('parseTimestamptz', () => {
  it('reads every fraction length as pg does, truncated to the millisecond', () => {
    for (const text of [
      '2026-11-27 20:18:13+00',
      '2026-11-27 20:18:13.1+00',
      '2026-11-27 20:18:13.12+00',
      '2026-11-27 20:18:13.123+00',
      '2026-11-27 20:18:13.1234+00',
      '2026-11-27 20:18:13.12345+00',
      '2026-11-27 20:18:13.999999+00',
      '2026-11-27 20:18:13.000001+00',
      '1000-01-01 00:00:00+00',
      '9999-12-31 23:59:59.999999+00',
      '2024-02-29 12:00:00.5+00',
    ]) {
      const parsed = parseTimestamptz(text) as Date;
      expect(parsed).toBeInstanceOf(Date);
      same(parsed, generalTimestamptz(text));
    }
  });

  it('agrees with pg on ten thousand random instants with microseconds', () => {
    for (let i = 0; i < 10_000; i++) {
      const millis = Math.floor(Math.random() * 8e12) - 1e12;
      const micros = String(Math.floor(Math.random() * 1_000_000))
        .padStart(6, '0')
        .replace(/0+$/, '');
      const iso = new Date(millis).toISOString();
      const text = `${iso.slice(0, 10)} ${iso.slice(11, 19)}${micros ? `.${micros}` : ''}+00`;
      const expected = new Date(`${iso.slice(0, 19)}.${(micros + '000').slice(0, 3)}Z`);
      expect((parseTimestamptz(text) as Date).getTime()).toBe(expected.getTime());
    }
  });

  it('hands other shapes to pg: offsets, early and BC years, infinity, garbage', () => {
    for (const text of [
      '2026-11-27 20:18:13.123+05:30',
      '2026-11-27 20:18:13-08',
      '0050-06-01 00:00:00+00',
      '0999-12-31 23:59:59+00',
      '0044-03-15 12:00:00+00 BC',
      '12026-01-01 00:00:00+00',
      'infinity',
      '-infinity',
      '2026-1x-27 20:18:13+00',
    ]) {
      same(parseTimestamptz(text), generalTimestamptz(text));
    }
  });
});

describe('parseTextArray', () => {
  it('reads plain arrays, empty arrays and NULL elements as pg does', () => {
    for (const text of ['{}', '{a}', '{member.added,member.removed}', '{NULL,x}', '{a,NULL}', '{1,2,3}']) {
      expect(parseTextArray(text)).toEqual(generalTextArray(text));
    }
  });

  it('hands quoted, escaped and nested arrays to pg', () => {
    for (const text of ['{"a b",c}', '{""}', '{"NULL"}', '{"a,b"}', '{"a\\"b"}', '{{a,b},{c,d}}', '{"{x}"}']) {
      expect(parseTextArray(text)).toEqual(generalTextArray(text));
    }
  });
});
