// The deletions that keep tables the size of what is live (the OAuth server's sweep, run by
// every client registration and token request; the outbox's retention) must find what they
// delete through an index: without one each run reads the whole table, live rows included. The
// statements are the ones the code runs (captured as compiled), each planned with sequential
// scans ruled out: a plan that still scans a table has no index for it. Runs on both databases.
import {
  CompiledQuery,
  sql,
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely';
import pino from 'pino';
import { migrateToLatest, type DatabaseHandle, type Db } from '../../src/db/database';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from '../../src/events/outbox';
import { sweepExpired } from '../../src/protocols/oauth-server/grants';
import { emptyDatabase } from '../support/database';

let database: DatabaseHandle;
beforeAll(async () => {
  database = await emptyDatabase();
  await migrateToLatest(database.db);
}, 60_000);
afterAll(() => database.close());

/** Keeps every statement run through it, compiled, and runs it as it is. */
class Captured implements KyselyPlugin {
  readonly statements: CompiledQuery[] = [];
  constructor(private readonly db: Db) {}
  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    this.statements.push(this.db.getExecutor().compileQuery(args.node, args.queryId));
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return args.result;
  }
}

/** The plan of each statement with sequential scans ruled out: the tables still scanned whole. */
async function scannedTables(statements: CompiledQuery[]): Promise<string[]> {
  return database.db.transaction().execute(async (trx) => {
    await sql`set local enable_seqscan = off`.execute(trx);
    const scanned: string[] = [];
    for (const statement of statements) {
      const plan = await trx.executeQuery<{ 'QUERY PLAN': string }>(CompiledQuery.raw(`explain ${statement.sql}`, [...statement.parameters]));
      for (const row of plan.rows) {
        const seq = /Seq Scan on (\w+)/.exec(row['QUERY PLAN']);
        if (seq) scanned.push(seq[1]!);
      }
    }
    return scanned;
  });
}

it('the OAuth sweep finds what expired in every table through an index', async () => {
  const captured = new Captured(database.db);
  await sweepExpired(database.db.withPlugin(captured));
  expect(captured.statements.length).toBeGreaterThanOrEqual(6);
  expect(await scannedTables(captured.statements)).toEqual([]);
});

it('the outbox retention finds old events and tool-call records through their primary keys', async () => {
  const captured = new Captured(database.db);
  await new OutboxDispatcher(database.db.withPlugin(captured), [], pino({ level: 'silent' }), DEFAULT_OUTBOX_OPTIONS).deleteExpired();
  expect(captured.statements).toHaveLength(2);
  expect(await scannedTables(captured.statements)).toEqual([]);
});
