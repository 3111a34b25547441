import type { Server } from 'node:http';
import { chmodSync, mkdirSync } from 'node:fs';
import { createApp } from './app';
import { ConfigError, loadConfig } from './config';
import { DatabaseInUseError, migrateToLatest, openDatabase } from './db/database';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from './events/outbox';
import { createMailer } from './events/email';
import { secretBoxOf } from './lib/crypto';
import { createLogger } from './lib/logger';
import { unsupportedNode } from './lib/node-lines';
import { bootstrap, writeBootstrapFile } from './operator';

async function main(): Promise<void> {
  const unsupported = unsupportedNode();
  if (unsupported) throw new ConfigError(unsupported);
  // DATA_DIR holds the embedded database, the generated key and the bootstrap token: whatever
  // this process creates is its owner's alone.
  process.umask(0o077);
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  chmodSync(config.dataDir, 0o700);
  const database = await openDatabase({
    url: config.databaseUrl,
    listenUrl: config.databaseListenUrl,
    dataDir: config.dataDir,
    preparedStatements: config.databasePreparedStatements,
    connectTimeoutMs: config.databaseConnectTimeoutMs,
    statementTimeoutMs: config.databaseStatementTimeoutMs,
    onConnectionError: (err) => logger.warn({ err: { message: err.message } }, 'database: a connection broke; the pool opens another when needed'),
  });
  // Without the statement timeout, under a lock of its own, whatever the pool's settings: migrateToLatest.
  const applied = await migrateToLatest(database.db);
  logger.info({ database: database.kind, migrations: applied }, 'database ready');

  if (config.autoBootstrap) {
    // Only a database without organizations is bootstrapped; replicas starting together on an
    // empty one create one organization between them (bootstrap serializes itself).
    const bootstrapEmail = process.env.BOOTSTRAP_EMAIL || 'owner@example.com';
    const result = await bootstrap(database.db, {
      baseUrl: config.baseUrl,
      email: bootstrapEmail,
      organizationName: process.env.BOOTSTRAP_ORGANIZATION || 'My organization',
      tokenDays: config.bootstrapTokenDays,
      onlyIfEmpty: true,
    });
    if (result?.created) {
      const file = writeBootstrapFile(config.dataDir, result);
      // For the person at the terminal: on stderr, so the token never enters the structured
      // log stream (stdout), which is shipped and kept.
      process.stderr.write(
        [
          '',
          'First start: created an organization, its owner and an API token with every permission.',
          `  base URL:        ${result.base_url}`,
          `  organization id: ${result.organization_id}`,
          `  API token:       ${result.api_token}   (shown once; also in ${file}, mode 0600)`,
          `  expires:         ${result.api_token_expires_at ?? 'never'} (BOOTSTRAP_TOKEN_DAYS; make longer-lived tokens with the CLI)`,
          `  try:             curl -H "Authorization: Bearer ${result.api_token}" ${result.base_url}/user/me`,
          `  sign in:         ${result.base_url}/sign-in as ${bootstrapEmail} (the link is emailed; without SMTP_URL it is printed here)`,
          '',
        ].join('\n'),
      );
      logger.info({ organization_id: result.organization_id, bootstrap_file: file }, 'first start: organization, owner and bootstrap token created');
    }
  }

  const mailer = createMailer(config.smtp.url, config.smtp.from, logger, config.outbound.timeoutMs, process.stderr);
  const secrets = secretBoxOf(config.encryptionKeys);
  const {
    listen,
    listenMetrics,
    unready,
    drain,
    registry,
    deps,
    close: closeApp,
  } = await createApp({ config, db: database.db, pool: database.pool, listen: database.listen, secrets, mailer, logger });
  const retention = config.toolCallRecordRetentionDays === 0 ? null : config.toolCallRecordRetentionDays * 86_400_000;
  const outboxOptions = { ...DEFAULT_OUTBOX_OPTIONS, toolCallRecordRetentionMs: retention };
  const dispatcher = new OutboxDispatcher(database.db, registry.consumers(deps), logger, outboxOptions, deps.metrics);
  dispatcher.start(config.outboxPollMs);
  const server: Server = await listen(config.port, config.host);
  logger.info({ url: config.baseUrl, host: config.host, port: config.port }, 'listening');
  const metricsServer = config.metrics.port === null ? null : await listenMetrics(config.metrics.port, config.metrics.host);
  if (metricsServer) logger.info({ host: config.metrics.host, port: config.metrics.port }, 'metrics and readiness listening');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    if (config.shutdownDelayMs > 0) {
      // Readiness says 503 first while requests are still served: the balancer stops sending
      // here within its check interval, and nothing it sent meanwhile is refused.
      logger.info({ signal, delay_ms: config.shutdownDelayMs }, 'shutting down: readiness 503, still serving while balancers notice');
      unready();
      await new Promise((resolve) => setTimeout(resolve, config.shutdownDelayMs));
    }
    logger.info({ signal }, 'shutting down: finishing requests in flight');
    drain();
    // Node closes only the connections idle at close(): one busy then (a balancer's kept-alive
    // connection) would stay open until the grace ends, and the balancer could hand it new
    // requests that the grace's end then cuts. So each answer from now on says
    // `Connection: close`, and connections are closed as soon as they fall idle.
    server.prependListener('request', (_req, res) => {
      if (!res.headersSent) res.setHeader('connection', 'close');
    });
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const idle = setInterval(() => server.closeIdleConnections(), 100);
    const timer = setTimeout(() => server.closeAllConnections(), config.shutdownGraceMs);
    await closed;
    clearInterval(idle);
    clearTimeout(timer);
    // Readiness answered 503 throughout the drain, so balancers stopped sending here; metrics stay scrapeable until the requests are done.
    metricsServer?.closeAllConnections();
    await new Promise<void>((resolve) => (metricsServer ? metricsServer.close(() => resolve()) : resolve()));
    await dispatcher.stop();
    await closeApp();
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
