import type { Server } from 'node:http';
import { mkdirSync } from 'node:fs';
import { createApp } from './app';
import { ConfigError, loadConfig } from './config';
import { DatabaseInUseError, migrateToLatest, openDatabase } from './db/database';
import { OutboxDispatcher } from './events/dispatcher';
import { createMailer } from './events/email';
import { SecretBox } from './lib/crypto';
import { createLogger } from './lib/logger';
import { bootstrap, writeBootstrapFile } from './operator';

async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  mkdirSync(config.dataDir, { recursive: true });
  const database = await openDatabase({ url: config.databaseUrl, dataDir: config.dataDir });
  const applied = await migrateToLatest(database.db);
  logger.info({ database: database.kind, migrations: applied }, 'database ready');

  if (config.autoBootstrap) {
    const empty = !(await database.db.selectFrom('organizations').select('id').limit(1).executeTakeFirst());
    if (empty) {
      const result = await bootstrap(database.db, {
        baseUrl: config.baseUrl,
        email: process.env.BOOTSTRAP_EMAIL || 'owner@example.com',
        organizationName: process.env.BOOTSTRAP_ORGANIZATION || 'My organization',
      });
      const file = writeBootstrapFile(config.dataDir, result);
      process.stdout.write(
        [
          '',
          'First start: created an organization, its owner and an API token with every permission.',
          `  base URL:        ${result.base_url}`,
          `  organization id: ${result.organization_id}`,
          `  API token:       ${result.api_token}   (shown once; also in ${file}, mode 0600)`,
          `  try:             curl -H "Authorization: Bearer ${result.api_token}" ${result.base_url}/user/me`,
          '',
        ].join('\n'),
      );
    }
  }

  const mailer = createMailer(config.smtp.url, config.smtp.from, logger, config.outbound.timeoutMs);
  const secrets = new SecretBox(config.encryptionKey);
  const app = await createApp({ config, db: database.db, pool: database.pool, secrets, mailer, logger });
  const dispatcher = new OutboxDispatcher(database.db, { mailer, secrets, outbound: config.outbound }, logger);
  dispatcher.start(config.outboxPollMs);
  const server: Server = await new Promise((resolve, reject) => {
    const s = app.listen(config.port, config.host, () => resolve(s));
    s.on('error', reject);
  });
  logger.info({ url: config.baseUrl, host: config.host, port: config.port }, 'listening');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down: finishing requests in flight');
    app.locals.draining = true;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const timer = setTimeout(() => server.closeAllConnections(), config.shutdownGraceMs);
    await closed;
    clearTimeout(timer);
    await dispatcher.stop();
    mailer.close();
    await database.close();
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

main().catch((err) => {
  if (err instanceof ConfigError) {
    process.stderr.write(`Configuration error: ${err.message}\n`);
  } else if (err instanceof DatabaseInUseError) {
    process.stderr.write(`Cannot start: ${err.message}\n`);
  } else {
    process.stderr.write(`Failed to start: ${err instanceof Error ? err.stack : String(err)}\n`);
  }
  process.exit(1);
});
