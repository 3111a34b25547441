// The benchmark's baselines: a bare Express 5 server answering one small JSON body, and, when
// DATABASE_URL is set, the same server reading one row with pg (one prepared statement per
// request, no framework): the least an authenticated read of one stored row could cost; and
// reading a page of 50 rows of one organization as pg parses them, sent as JSON: the least a
// list page could cost; and the same page as JSON text PostgreSQL builds (json_agg), sent as
// it comes, no row parsed in Node: what a list could reach were serialization moved into SQL.
// Run by scripts/bench/run.ts as its own process; listens on 127.0.0.1:$PORT.
import express from 'express';
import pg from 'pg';

const port = Number(process.env.PORT ?? 0);
const app = express();
app.get('/', (_req, res) => {
  res.json({ hello: 'world' });
});

const databaseUrl = process.env.DATABASE_URL;
const pool = databaseUrl ? new pg.Pool({ connectionString: databaseUrl, max: 20 }) : null;
if (pool) {
  app.get('/notification-destination/:org/:id', async (req, res) => {
    const result = await pool.query({
      name: 'read_destination',
      text: 'select * from notification_destinations where org_id = $1 and id = $2',
      values: [req.params.org, req.params.id],
    });
    res.json(result.rows[0]);
  });
  app.get('/notification-destination/:org', async (req, res) => {
    const result = await pool.query({
      name: 'list_destinations',
      text: 'select * from notification_destinations where org_id = $1 order by id limit 51',
      values: [req.params.org],
    });
    res.json({ data: result.rows.slice(0, 50), next_cursor: result.rows.length > 50 ? result.rows[49]!.id : null });
  });
  app.get('/notification-destination-json/:org', async (req, res) => {
    const result = await pool.query<{ body: string }>({
      name: 'list_destinations_json',
      text: `with page as (select * from notification_destinations where org_id = $1 order by id limit 51)
             select json_build_object(
               'data', coalesce((select json_agg(p order by p.id) from (select * from page order by id limit 50) p), '[]'::json),
               'next_cursor', case when (select count(*) from page) > 50 then (select id from page order by id offset 49 limit 1) end
             )::text as body`,
      values: [req.params.org],
    });
    res.type('application/json').send(result.rows[0]!.body);
  });
}

const server = app.listen(port, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening on ${typeof address === 'object' && address ? address.port : port}\n`);
});
const stop = () => server.close(() => void (pool ? pool.end() : Promise.resolve()).then(() => process.exit(0)));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
