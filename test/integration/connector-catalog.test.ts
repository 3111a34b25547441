import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config';
import { CatalogError, loadCatalog, syncCatalog } from '../../src/areas/connectors/catalog';
import type { DatabaseHandle } from '../../src/db/database';
import { freshDatabase } from '../support/database';

/*
 * The built-in catalog loader: every file checked against the spec's schemas and the content
 * rules at start (a bad file names itself and the JSON pointer), every version recorded once,
 * and a changed file under an old version refused. The shipped catalog must load: a bad file
 * there fails this test.
 */

const FIXTURES = join(__dirname, '..', 'fixtures', 'catalog');
const fixture = (name: string) => readFileSync(join(FIXTURES, name), 'utf8');

function catalogDir(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'cp-catalog-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

function problemsOf(run: () => unknown): string {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(CatalogError);
    return (err as Error).message;
  }
  throw new Error('expected a CatalogError');
}

let database: DatabaseHandle;
beforeAll(async () => {
  database = await freshDatabase();
});
afterAll(() => database.close());

it('loads the shipped catalog (CATALOG_DIR by default) and the test fixtures', () => {
  const shipped = loadCatalog(loadConfig({ NODE_ENV: 'test', ENCRYPTION_KEY: 'a'.repeat(64) }).catalogDir);
  // Real remote MCP servers, each checked against its vendor's documentation on a recorded date.
  expect(shipped.entries.size).toBeGreaterThanOrEqual(10);
  for (const entry of shipped.entries.values()) {
    expect(entry.docs_url).toMatch(/^https:\/\//);
    expect(entry.content.mcp_url).toMatch(/^https:\/\//);
  }
  const catalog = loadCatalog(FIXTURES);
  expect([...catalog.entries.keys()]).toEqual(['docs-demo', 'keys-demo', 'tickets-demo']);
  expect(catalog.entries.get('tickets-demo')?.content.auth).toEqual({
    type: 'oauth2',
    authorize_url: null,
    token_url: null,
    revocation_url: null,
    scopes: ['read'],
    client_id: null,
    pkce: true,
  });
});

it('names the file and the JSON pointer of every problem', () => {
  const good = fixture('keys-demo.yml');
  const message = problemsOf(() =>
    loadCatalog(
      catalogDir({
        'keys-demo.yml': good.replace('transport: streamable_http', 'transport: ftp').replace('version: 1', 'version: 1\ncolour: red'),
        'wrong-name.yml': good,
        'secret.yml': good
          .replace('slug: keys-demo', 'slug: secret')
          .replace(/auth:[\s\S]*?tools:/, 'auth:\n  type: oauth2\n  client_id: x\n  client_secret: y\ntools:'),
        'private.yml': good.replace('slug: keys-demo', 'slug: private').replace('https://mcp.keys.example/mcp', 'https://10.1.2.3/mcp'),
        'broken.yml': 'slug: [unclosed',
      }),
    ),
  );
  expect(message).toContain('keys-demo.yml: /transport');
  expect(message).toContain('keys-demo.yml: /colour is not a known member');
  expect(message).toContain('wrong-name.yml: /slug is keys-demo; the file must be named keys-demo.yml');
  expect(message).toContain('secret.yml: /auth/client_secret must not be in the repository');
  expect(message).toContain('private.yml: /mcp_url points to a private address');
  expect(message).toContain('broken.yml:');
});

it('records each version once and refuses a changed file under a version it has seen', async () => {
  const v1 = fixture('keys-demo.yml');
  const first = loadCatalog(catalogDir({ 'keys-demo.yml': v1 }));
  await syncCatalog(database.db, first);
  await syncCatalog(database.db, loadCatalog(catalogDir({ 'keys-demo.yml': v1 })));

  const changed = loadCatalog(catalogDir({ 'keys-demo.yml': v1.replace('name: Keys Demo', 'name: Keys Demo 2') }));
  await expect(syncCatalog(database.db, changed)).rejects.toThrow(/keys-demo.yml: version 1 was loaded before with other content; bump the version/);

  const v2 = loadCatalog(
    catalogDir({
      'keys-demo.yml': v1
        .replace('name: Keys Demo', 'name: Keys Demo 2')
        .replace('version: 1', 'version: 2')
        .replace('released: "2026-10-15"', 'released: "2026-11-25"'),
    }),
  );
  await syncCatalog(database.db, v2);
  const entry = v2.entries.get('keys-demo')!;
  expect([entry.createdAt.toISOString(), entry.updatedAt.toISOString()]).toEqual(['2026-10-15T00:00:00.000Z', '2026-11-25T00:00:00.000Z']);
  const rows = await database.db.selectFrom('catalog_versions').select(['version']).where('slug', '=', 'keys-demo').orderBy('version').execute();
  expect(rows.map((r) => r.version)).toEqual([1, 2]);

  // A rolled-back deployment serves its older file; the newer version stays recorded.
  await expect(syncCatalog(database.db, loadCatalog(catalogDir({ 'keys-demo.yml': v1 })))).resolves.toBeUndefined();
});
