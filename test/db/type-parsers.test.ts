// Timestamps and text arrays as the database sends them arrive as the same Dates and arrays
// pg's general parsers make of their text forms (on PostgreSQL the direct readers of
// src/db/type-parsers.ts read them; on the embedded database, PGlite's own parsers).
// The expectation is pg's general parser applied to the value's text.
import { sql } from 'kysely';
import type { DatabaseHandle } from '../../src/db/database';
import { generalTimestamptz } from '../../src/db/type-parsers';
import { emptyDatabase } from '../support/database';

let database: DatabaseHandle;
beforeAll(async () => {
  database = await emptyDatabase();
});
afterAll(() => database.close());

it('reads timestamptz of every precision and range as its text form says', async () => {
  // Infinity and years before 1000 go to pg's general parser; PGlite's own parser (the
  // embedded database) reads them otherwise, and the app stores none of them.
  const edges = database.kind === 'postgres' ? ['0050-06-01 00:00:00+00', '0044-03-15 12:00:00+00 BC', 'infinity', '-infinity'] : [];
  const { rows } = await sql<{ value: Date | number; text: string }>`
    select value, value::text as text from (
      select ('2026-11-27 20:18:13+00'::timestamptz + make_interval(secs => n / 7.0 + n * 0.000001 * n)) as value
      from generate_series(0, 500) n
      union all select unnest(${['1000-01-01 00:00:00+00', '9999-12-31 23:59:59.999999+00', ...edges]}::timestamptz[])
    ) v`.execute(database.db);
  const time = (value: Date | number) => (value instanceof Date ? value.getTime() : value);
  expect(rows).toHaveLength(503 + edges.length);
  for (const row of rows) {
    expect({ text: row.text, time: time(row.value) }).toEqual({ text: row.text, time: time(generalTimestamptz(row.text) as Date | number) });
  }
});

it('reads text arrays, plain and quoted, with NULLs', async () => {
  const { rows } = await sql<{ value: (string | null)[] }>`
    select value from (values
      (array[]::text[]), (array['member.added', 'member.removed']), (array['a', null]),
      (array['a b', '', 'NULL', 'x,y', 'q"t', 'b\\s', '{z}'])
    ) v(value)`.execute(database.db);
  expect(rows.map((r) => r.value)).toEqual([[], ['member.added', 'member.removed'], ['a', null], ['a b', '', 'NULL', 'x,y', 'q"t', 'b\\s', '{z}']]);
});
