import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely';

/**
 * What a committed write changed, as the caches that forget after it need to know: the
 * organization it acted in ('' when none, or when it may have changed any), and the tables
 * its statements wrote (null when a statement could not be read: raw SQL, DDL).
 */
export interface CommittedChange {
  scope: string;
  tables: ReadonlySet<string> | null;
}

/** A change that may have touched anything (a write whose statements were not followed). */
export const ANY_CHANGE: CommittedChange = { scope: '', tables: null };

/** Whether a committed change may have written one of `tables`. */
export function touches(change: CommittedChange, tables: ReadonlySet<string>): boolean {
  if (change.tables === null) return true;
  for (const table of change.tables) if (tables.has(table)) return true;
  return false;
}

type Node = { kind?: unknown } & Record<string, unknown>;

const WRITES = new Set(['InsertQueryNode', 'UpdateQueryNode', 'DeleteQueryNode', 'MergeQueryNode']);
/** Statements whose writes are read from their nodes; any other statement (raw SQL, DDL) may write anything. */
const READABLE = new Set(['SelectQueryNode', ...WRITES]);

function tableName(node: unknown): string | null {
  const n = node as Node | undefined;
  if (n?.kind === 'AliasNode') return tableName(n.node);
  if (n?.kind !== 'TableNode') return null;
  const identifier = (n.table as Node | undefined)?.identifier as Node | undefined;
  return typeof identifier?.name === 'string' ? identifier.name : null;
}

/** The tables a write node targets; null when they cannot be told. */
function targets(node: Node): string[] | null {
  const found =
    node.kind === 'InsertQueryNode' || node.kind === 'MergeQueryNode'
      ? [node.into]
      : node.kind === 'UpdateQueryNode'
        ? [node.table]
        : (((node.from as Node | undefined)?.froms as unknown[] | undefined) ?? []);
  const names = found.map(tableName);
  return names.length > 0 && names.every((name) => name !== null) ? (names as string[]) : null;
}

/**
 * Follows the statements of a transaction (`db.withPlugin(tables).transaction()`) and
 * collects the tables they write, writes nested in a select's CTEs included. A statement it
 * cannot read makes the whole set unknown (`tables` null): the caches then forget everything,
 * as before. Raw SQL fragments inside a built statement (`sql\`now()\``) are values, not
 * statements of their own, and write nothing.
 */
export class WrittenTables implements KyselyPlugin {
  private written: Set<string> | null = new Set();

  get tables(): ReadonlySet<string> | null {
    return this.written;
  }

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (this.written) {
      if (!READABLE.has(args.node.kind)) this.written = null;
      else this.collect(args.node as unknown as Node);
    }
    return args.node;
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return args.result;
  }

  private collect(node: Node): void {
    if (!this.written) return;
    if (typeof node.kind === 'string' && WRITES.has(node.kind)) {
      const names = targets(node);
      if (!names) {
        this.written = null;
        return;
      }
      for (const name of names) this.written.add(name);
    }
    for (const value of Object.values(node)) {
      if (Array.isArray(value)) {
        for (const item of value) if (item && typeof item === 'object') this.collect(item as Node);
      } else if (value && typeof value === 'object') this.collect(value as Node);
    }
  }
}
