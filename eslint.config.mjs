// ESLint: TypeScript rules, and the layers of src/ and what each may import.
// The LAYERS table below is the source of truth for the layering; CONTRIBUTING.md explains it.
import js from '@eslint/js';
import boundaries from 'eslint-plugin-boundaries';
import tseslint from 'typescript-eslint';

/*
 * The layers. `paths` are folders (or single files) from the repository root; the first layer
 * whose path holds a file is its layer (files before the folders that hold them).
 *
 * `may` lists the layers a layer's files may import, besides files of their own layer.
 * `mayTypes` lists layers it may import types from only (`import type`).
 * `forbidPackages` names npm packages the layer must not import.
 * `'area-entry'` in `may`: another area only through that area's `index.ts` (AREA_ENTRY below).
 * An area is one folder of src/areas/: its files import each other freely; without
 * 'area-entry' no other area's file at all, and `'*'` (anything) includes areas' insides.
 */
const SHARED = ['lib', 'generated', 'config', 'spec', 'db', 'outbound', 'protocols', 'identity', 'access', 'policy', 'http', 'events'];

const LAYERS = {
  // composition root: wires everything together
  root: {
    paths: ['src/app.ts', 'src/main.ts', 'src/modules.ts', 'src/cli.ts', 'src/cli', 'src/operator.ts', 'generated/modules.ts'],
    may: ['*'],
  },
  // leaf helpers (crypto, ids, logger, storage)
  lib: { paths: ['src/lib'], may: ['generated'] },
  // the data layer: Kysely, migrations, schema; no HTTP, no areas
  db: { paths: ['src/db'], may: ['lib', 'generated'], forbidPackages: ['express'] },
  // the SSRF-guarded outbound HTTP client
  outbound: { paths: ['src/outbound'], may: ['lib'] },
  // wire protocols apart from REST areas: oauth-client, oauth-server, saml, oidc, scim; areas
  // through their index.ts (DESIGN: areas' index.ts <- mcp, protocols): SCIM ends a membership
  // exactly as the Members area does, SSO sign-in ends in the auth area's sessions.
  protocols: {
    paths: ['src/protocols'],
    may: ['lib', 'generated', 'config', 'spec', 'outbound', 'db', 'events', 'http', 'identity', 'access', 'area-entry'],
  },
  // the pages a browser needs (sign-in, consent, second factor): like protocols, plus areas' index.ts
  web: {
    paths: ['src/web'],
    may: ['lib', 'generated', 'config', 'spec', 'outbound', 'db', 'events', 'http', 'identity', 'access', 'area-entry'],
  },
  // policy evaluation: pure (no db, no http): the inputs come in as arguments
  policy: { paths: ['src/access/policy/evaluate.ts', 'src/access/policy/glob.ts'], may: ['lib', 'generated'] },
  // credentials, tokens, sessions, users, permissions
  identity: {
    paths: ['src/identity'],
    may: ['lib', 'generated', 'spec', 'db', 'events', 'outbound', 'http', 'access', 'policy'],
  },
  // shares, entitlements, seats, and access/policy (loading what policy evaluates)
  access: {
    paths: ['src/access'],
    may: ['lib', 'generated', 'spec', 'db', 'events', 'outbound', 'http', 'identity', 'policy'],
  },
  // request machinery: routing, validation, errors, context, pagination
  http: { paths: ['src/http'], may: ['lib', 'generated', 'config', 'spec', 'db', 'events', 'identity', 'access'] },
  // the outbox, deliveries, notification senders
  events: { paths: ['src/events'], may: ['lib', 'generated', 'db', 'outbound'], mayTypes: ['http'] },
  // the spec as loaded at run time, and its configuration
  spec: { paths: ['src/spec'], may: ['lib', 'generated'] },
  config: { paths: ['src/config.ts'], may: ['lib', 'generated', 'spec'] },
  // the MCP runtime: endpoint, upstream client/session/pool, invoke; areas through their index.ts
  mcp: {
    paths: ['src/mcp'],
    may: [...SHARED, 'area-entry'],
  },
  // the REST areas, one folder each: shared machinery, and other areas through their index.ts
  area: { paths: ['src/areas/*'], may: [...SHARED, 'mcp', 'area-entry'] },
  // generated from spec/ and the migrations by `make generate`
  generated: { paths: ['generated'], may: [] },
  test: { paths: ['test'], may: ['*'] },
  scripts: { paths: ['scripts'], may: ['*'] },
};

/** The one file through which an area is reached from outside it. */
const AREA_ENTRY = 'index.ts';

// ---- from the table to the plugin's settings and policies ----

const isFile = (p) => /\.[a-z]+$/.test(p);
const elements = Object.entries(LAYERS).flatMap(([type, { paths }]) =>
  paths.map((pattern) => ({
    type,
    pattern,
    // A folder is matched from the repository root; a single file needs the (deprecated, still
    // supported) mode 'full', as element patterns otherwise only match folders.
    ...(isFile(pattern) ? { mode: 'full' } : { partialMatch: false }),
    ...(type === 'area' ? { capture: ['name'] } : {}),
  })),
);
// root before lib etc.; files before the folders that hold them (outbound.ts before src/lib)
elements.sort((a, b) => isFile(b.pattern) - isFile(a.pattern));

const types = Object.keys(LAYERS);
const policies = Object.entries(LAYERS).flatMap(([type, { may, mayTypes = [] }]) => {
  const from = { element: { type } };
  const out = [];
  // a layer's files may import each other; an area's only within that area (checked as internal)
  const own = type === 'area' ? [] : [type];
  const allowed = may.includes('*') ? types : [...own, ...may.filter((t) => t !== 'area-entry')];
  if (allowed.length) out.push({ from, allow: { to: { element: { types: allowed } } } });
  if (may.includes('area-entry') || may.includes('*')) {
    out.push({ from, allow: { to: { element: { type: 'area', fileInternalPath: AREA_ENTRY } } } });
  }
  if (mayTypes.length) out.push({ from, allow: { to: { element: { types: mayTypes } }, dependency: { kind: 'type' } } });
  return out;
});

export const forbiddenPackages = Object.entries(LAYERS)
  .filter(([, l]) => l.forbidPackages)
  .map(([, l]) => ({
    files: l.paths.map((p) => (isFile(p) ? p : `${p}/**`)),
    rules: {
      'no-restricted-imports': [
        'error',
        { paths: l.forbidPackages.map((name) => ({ name, message: 'this layer knows no HTTP (see LAYERS in eslint.config.mjs)' })) },
      ],
    },
  }));

/** The layering alone, also used by scripts/lint-boundaries-proof.mjs. */
export const boundariesConfig = {
  files: ['**/*.ts', '**/*.mjs', '**/*.js', '**/*.cjs'],
  languageOptions: { parser: tseslint.parser },
  plugins: { boundaries },
  settings: {
    'boundaries/elements': elements,
    'boundaries/legacy-warnings': false,
    'boundaries/include': ['src/**', 'generated/**', 'test/**', 'scripts/**'],
    'boundaries/dependency-nodes': ['import', 'export', 'dynamic-import'],
    'import/resolver': { node: { extensions: ['.ts', '.js', '.json'] } },
  },
  rules: {
    'boundaries/dependencies': ['error', { default: 'disallow', policies }],
    'boundaries/no-unknown-files': 'error',
  },
};

const TYPED = ['src/**/*.ts', 'test/**/*.ts', 'scripts/**/*.ts'];

export default tseslint.config(
  // generated/ is linted for its imports only (boundariesConfig)
  { ignores: ['dist/**', 'data/**', 'coverage/**', '.test-results/**', '.scratch/**', 'node_modules/**'] },
  {
    files: ['**/*.ts', '**/*.js', '**/*.mjs', '**/*.cjs'],
    ignores: ['generated/**'],
    extends: [js.configs.recommended, tseslint.configs.recommended],
  },
  {
    files: TYPED,
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // Type-aware rules cost a TypeScript program: the whole tree took 51 s without any, 116 s
      // with these two, and 242 s with recommendedTypeChecked on src/ alone (2 shared cores,
      // load average 11-12). These two catch what tsc does not: a promise nobody awaits.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
    },
  },
  {
    files: ['**/*.ts'],
    ignores: ['generated/**'],
    rules: {
      // `any` marks where a library or a JSON document gives no better type (Kysely<any> in
      // migrations, the spec as JSON, Node's lookup callback); strict tsc keeps the rest typed.
      '@typescript-eslint/no-explicit-any': 'off',
      // A leading underscore names what is left unused on purpose (a destructured-away member).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
    },
  },
  {
    files: ['test/**/*.ts'],
    // JSON data and Node's own modules may be loaded where a test needs them
    rules: { '@typescript-eslint/no-require-imports': ['error', { allow: ['\\.json$', '^node:'] }] },
  },
  {
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: {
      sourceType: 'commonjs',
      globals: { require: 'readonly', module: 'writable', __dirname: 'readonly', process: 'readonly', console: 'readonly' },
    },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  boundariesConfig,
  ...forbiddenPackages,
);
