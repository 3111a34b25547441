// `make migration name=add_widgets`: a new, empty migration named by the current UTC time, so
// that migrations written on two branches never share a name and keep the order they were
// written in. Fill in up() and down(); `make test` migrates an empty database up, down and up.
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const name = process.argv[2] ?? '';
if (!/^[a-z][a-z0-9_]{2,60}$/.test(name)) {
  console.error('Usage: make migration name=add_widgets   (lowercase letters, digits and _; what the migration does)');
  process.exit(2);
}
const stamp = new Date().toISOString().replace(/[-:]/g, '').replace('T', '_').slice(0, 15); // YYYYMMDD_HHMMSS
const file = join(
  resolve(__dirname, '..', 'src', 'db', 'migrations'),
  `${stamp.slice(0, 4)}_${stamp.slice(4, 6)}_${stamp.slice(6, 8)}_${stamp.slice(9)}_${name}.ts`,
);
if (existsSync(file)) {
  console.error(`${file} exists already.`);
  process.exit(1);
}
writeFileSync(
  file,
  `// What this migration changes, and why. Landed migrations are never edited: a later change
// to the schema is a new migration. \`make generate\` then rewrites generated/database.ts.
import { type Kysely, sql } from 'kysely';
import { dropTouchUpdatedAt, idColumn, reference, touchUpdatedAt } from '../migration-helpers';

export async function up(db: Kysely<any>): Promise<void> {
  // For example:
  // await db.schema
  //   .createTable('widgets')
  //   .addColumn('id', idColumn('wdg'))
  //   .addColumn('org_id', reference, (c) => c.notNull().references('organizations.id').onDelete('cascade'))
  //   .addColumn('name', 'text', (c) => c.notNull())
  //   .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql\`now()\`))
  //   .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql\`now()\`))
  //   .execute();
  // await touchUpdatedAt(db, 'widgets');
}

export async function down(db: Kysely<any>): Promise<void> {
  // await dropTouchUpdatedAt(db, 'widgets');
  // await db.schema.dropTable('widgets').execute();
}
`,
);
console.log(`Wrote ${file}`);
