// Operator CLI: what the API refuses to tokens. `npm run cli -- help` lists the commands.
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from '../src/config';
import { DatabaseInUseError, migrateToLatest, openDatabase, type DatabaseHandle } from '../src/db/database';
import { serviceRegistry } from '../src/modules';
import { secretBoxOf } from '../src/lib/crypto';
import { retireSigningKeys } from '../src/protocols/oauth-server/keys';
import { bootstrap, createOrganization, createScimToken, createToken, OperatorError, resealSecrets, revokeToken, writeBootstrapFile } from '../src/operator';

const HELP = `Usage: npm run cli -- <command> [options]

Commands:
  bootstrap [--email E] [--org-name N] [--base-url URL]
      Idempotent. The first time: an organization, its owner (E) and an API token with every
      permission, saved to DATA_DIR/bootstrap.json (mode 0600). Later: the ids it created.
      The base URL recorded is --base-url, else BASE_URL, else the server's default.
  org create --name N --owner-email E [--owner-name NAME]
      A further organization with its owner (created if the email is new).
  token create --org ORG_ID --user EMAIL|USER_ID [--name N] [--permissions all|p1,p2] [--expires-in-days D]
      An API token for an active member; printed once.
  token revoke TOKEN_ID
      Revokes a token at once.
  scim-token create --org ORG_ID [--name N] [--expires-in-days D]
      A SCIM token for the organization's identity provider (base URL: BASE_URL/scim/v2);
      printed once. People revoke it in the web app (DELETE /scim-token/{id}).
  secrets reseal
      After a new key was put first in ENCRYPTION_KEYS (older ones after it): seals every
      stored secret with it. Then the old keys can be dropped. Safe to repeat, and to run
      while the server runs.
  oauth-keys rotate
      Retires the keys the MCP OAuth server signs tokens with: new tokens get a new key
      (running servers switch within 5 minutes); the retired keys stay in /oauth/jwks for a
      day, so tokens they signed keep verifying until they expire. Safe while the server runs.

Options:
  --json   print the result as JSON
The database is the server's: DATABASE_URL, or the embedded one in DATA_DIR (stop the server first).`;

const COMMANDS = new Set(['bootstrap', 'org create', 'token create', 'token revoke', 'scim-token create', 'secrets reseal', 'oauth-keys rotate']);

type Flags = Record<string, string | boolean | undefined>;

function required(flags: Flags, name: string): string {
  const value = flags[name];
  if (typeof value !== 'string' || value === '') throw new OperatorError(`--${name} is required. See: npm run cli -- help`);
  return value;
}

function print(result: Record<string, unknown>, json: boolean, text: string): void {
  process.stdout.write(json ? `${JSON.stringify(result, null, 2)}\n` : `${text}\n`);
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      json: { type: 'boolean' },
      email: { type: 'string' },
      'org-name': { type: 'string' },
      'base-url': { type: 'string' },
      name: { type: 'string' },
      'owner-email': { type: 'string' },
      'owner-name': { type: 'string' },
      org: { type: 'string' },
      user: { type: 'string' },
      permissions: { type: 'string' },
      'expires-in-days': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, sub, arg] = positionals;
  const key = [command, sub].filter(Boolean).join(' ');
  if (!command || values.help || command === 'help') {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  if (!COMMANDS.has(key)) throw new OperatorError(`Unknown command "${key}". See: npm run cli -- help`);
  const json = values.json === true;
  const config = loadConfig(typeof values['base-url'] === 'string' ? { ...process.env, BASE_URL: values['base-url'] } : process.env);
  let database: DatabaseHandle | null = null;
  try {
    database = await openDatabase({ url: config.databaseUrl, dataDir: config.dataDir, preparedStatements: config.databasePreparedStatements });
    await migrateToLatest(database.db);
    const db = database.db;
    if (command === 'bootstrap') {
      const result = await bootstrap(db, {
        baseUrl: config.baseUrl,
        email: typeof values.email === 'string' ? values.email : process.env.BOOTSTRAP_EMAIL || 'owner@example.com',
        organizationName: typeof values['org-name'] === 'string' ? values['org-name'] : process.env.BOOTSTRAP_ORGANIZATION || 'My organization',
        tokenDays: config.bootstrapTokenDays,
      });
      const file = result.created ? writeBootstrapFile(config.dataDir, result) : null;
      print(
        { ...result },
        json,
        result.created
          ? `Created organization ${result.organization_id} and its owner ${result.user_id}.\nAPI token (shown once, also in ${file}; expires ${result.api_token_expires_at ?? 'never'}): ${result.api_token}`
          : `Already bootstrapped: organization ${result.organization_id}, owner ${result.user_id}. Create another token with: npm run cli -- token create --org ${result.organization_id} --user ${result.user_id}`,
      );
      return 0;
    }
    if (key === 'org create') {
      const result = await createOrganization(db, {
        name: required(values, 'name'),
        ownerEmail: required(values, 'owner-email'),
        ownerName: (values['owner-name'] as string) ?? null,
      });
      print({ ...result }, json, `Created organization ${result.organization_id} owned by ${result.user_id}.`);
      return 0;
    }
    if (key === 'token create') {
      const permissions =
        typeof values.permissions === 'string' && values.permissions !== 'all'
          ? values.permissions
              .split(',')
              .map((p) => p.trim())
              .filter(Boolean)
          : 'all';
      const days = values['expires-in-days'] === undefined ? null : Number(values['expires-in-days']);
      if (days !== null && (!Number.isInteger(days) || days < 1)) throw new OperatorError('--expires-in-days must be a whole number of days, 1 or more.');
      const result = await createToken(db, {
        orgId: required(values, 'org'),
        user: required(values, 'user'),
        name: (values.name as string) || 'cli',
        permissions,
        expiresInDays: days,
      });
      print({ ...result }, json, `Token ${result.token_id} for ${result.user_id} in ${result.organization_id} (shown once):\n${result.api_token}`);
      return 0;
    }
    if (key === 'scim-token create') {
      const days = values['expires-in-days'] === undefined ? null : Number(values['expires-in-days']);
      if (days !== null && (!Number.isInteger(days) || days < 1 || days > 731))
        throw new OperatorError('--expires-in-days must be a whole number of days, 1 to 731.');
      const result = await createScimToken(db, { orgId: required(values, 'org'), name: (values.name as string) || 'cli', expiresInDays: days });
      print(
        { ...result, scim_base_url: `${config.baseUrl.replace(/\/$/, '')}/scim/v2` },
        json,
        `SCIM token ${result.token_id} for ${result.organization_id} (shown once; SCIM base URL ${config.baseUrl.replace(/\/$/, '')}/scim/v2):\n${result.scim_token}`,
      );
      return 0;
    }
    if (key === 'token revoke') {
      if (!arg) throw new OperatorError('Name the token: npm run cli -- token revoke tok_…');
      const result = await revokeToken(db, arg);
      print(result, json, `Revoked ${result.token_id}.`);
      return 0;
    }
    if (key === 'secrets reseal') {
      const report = await resealSecrets(db, secretBoxOf(config.encryptionKeys), serviceRegistry().sealed);
      print(
        { ...report },
        json,
        `Re-sealed ${report.resealed} secret(s) with the current key; ${report.current} already were.${
          report.unreadable.length > 0
            ? `\nNo configured key opens: ${report.unreadable.join(', ')}. Add the key that sealed them to ENCRYPTION_KEYS and run again.`
            : ''
        }`,
      );
      return report.unreadable.length > 0 ? 1 : 0;
    }
    if (key === 'oauth-keys rotate') {
      const retired = await retireSigningKeys(db);
      print(
        { retired },
        json,
        retired.length > 0
          ? `Retired ${retired.join(', ')}; the next token is signed with a new key.`
          : 'No key was signing yet; the first token will make one.',
      );
      return 0;
    }
    throw new OperatorError(`Unknown command "${key}". See: npm run cli -- help`);
  } finally {
    await database?.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    const code = (err as { code?: string }).code ?? '';
    const known = err instanceof OperatorError || err instanceof ConfigError || err instanceof DatabaseInUseError || code.startsWith('ERR_PARSE_ARGS_');
    process.stderr.write(`${known ? err.message : err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(known ? 2 : 1);
  },
);
