// The deployment an operator runs, on loopback, everything of its own (free ports, temporary
// directories; the machine's PostgreSQL on 5432 and Redis on 6379 are never touched):
//
//   PostgreSQL 15   a scratch cluster (initdb + postgres, as the `postgres` OS user)
//   PgBouncer       transaction pooling in front of it (what the replicas' pools go through)
//   Redis           the shared rate-limit counters (RATE_LIMIT_STORE=redis)
//   N replicas      the built server (dist/), each with its PORT and METRICS_PORT; their change
//                   listener (LISTEN/NOTIFY) goes to PostgreSQL directly (DATABASE_LISTEN_URL),
//                   as a pooler in transaction mode cannot keep a session
//   HAProxy         round robin over the replicas, health-checking each one's `/ready`
//   upstream MCP    scripts/bench/upstream-peers.ts (an API-key MCP server with `echo`)
//   webhook         a receiver in this process: a Slack-type notification destination's URL
//
// Seeded through the API with the bootstrap token: a connector to the upstream (the one row
// written directly: a custom API-key connector to loopback), a connection, an MCP server
// serving every tool, and the webhook destination subscribed to `role.*`.
//
// PgBouncer 1.18 compatibility (what an operator needs, found here): the pool sends
// `options=-c TimeZone=UTC` at start-up, which PgBouncer refuses ("unsupported startup
// parameter: options") unless `ignore_startup_parameters = extra_float_digits,options`; the
// settings then never reach PostgreSQL, so the database's own time zone must be UTC
// (`ALTER DATABASE … SET timezone = 'UTC'`), and its statement timeout is set there too.
// Named prepared statements must be off (DATABASE_PREPARED_STATEMENTS=false): PgBouncer
// before 1.21 does not carry them between server connections.
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { chownSync, createWriteStream, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { openDatabase } from '../../src/db/database';
import { startHttpReceiver } from '../../test/support/peers';
import { addApiKeyConnector } from '../bench/support';
import {
  atCleanup,
  firstLine,
  freePort,
  HOST,
  realServerArgs,
  startChild as startProcess,
  stopChild,
  tempDir,
  ROOT,
  tsxArgs,
  waitUntilUp,
  type Child,
} from '../bench/processes';

const execFileAsync = promisify(execFile);
const PG_BIN = '/usr/lib/postgresql/15/bin';
const DATABASE = 'cp';

export interface ClusterOptions {
  replicas?: number;
  /** Extra environment for every replica (a scenario's own rate limit, say). */
  env?: Record<string, string>;
}

export interface Replica {
  index: number;
  port: number;
  metricsPort: number;
  url: string;
  metricsUrl: string;
  dataDir: string;
  child: Child | null;
}

export interface Seed {
  orgId: string;
  userId: string;
  /** The bootstrap API token (every permission). */
  token: string;
  mcpServerId: string;
  mcpToken: string;
  /** The MCP tool name that echoes (`<connector>__echo`). */
  echoTool: string;
  /** The path on the webhook receiver that the notification destination posts to. */
  webhookPath: string;
}

export type Receiver = Awaited<ReturnType<typeof startHttpReceiver>>;

export interface Cluster {
  lbUrl: string;
  replicas: Replica[];
  /** PostgreSQL itself (superuser, the app's database), bypassing PgBouncer: for checks. */
  directUrl: string;
  bouncerUrl: string;
  redisUrl: string;
  upstreamUrl: string;
  upstreamKey: string;
  receiver: Receiver;
  seed: Seed;
  /** Headers of the bootstrap token for the API. */
  headers: Record<string, string>;
  startReplica(i: number): Promise<void>;
  /** SIGTERM, and waits for the exit. */
  stopReplica(i: number): Promise<void>;
  /** SIGKILL, and waits for the exit. */
  killReplica(i: number): Promise<void>;
  restartReplica(i: number): Promise<void>;
  stopPostgres(): Promise<void>;
  startPostgres(): Promise<void>;
  stopRedis(): Promise<void>;
  startRedis(): Promise<void>;
  /** HAProxy's view of each replica: `UP`, `DOWN`, `MAINT`, `UP 1/2`… by replica name (r0, r1…). */
  backendStatus(): Promise<Record<string, string>>;
  /** The operator CLI (scripts/cli.ts … --json) on the cluster's database; its JSON answer. */
  cli(args: string[]): Promise<any>;
  /** Runs `run` on one direct connection to the app's database. */
  query<T extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<T[]>;
  stop(): Promise<void>;
}

function postgresUser(): { uid: number; gid: number } {
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** Debian packages the cluster needs, installed when absent (as root, like CI). */
function ensurePackages(): void {
  const wanted: [string, string][] = [
    ['haproxy', '/usr/sbin/haproxy'],
    ['pgbouncer', '/usr/sbin/pgbouncer'],
    ['redis-server', '/usr/bin/redis-server'],
    ['postgresql-15', `${PG_BIN}/postgres`],
  ];
  const missing = wanted.filter(([, path]) => spawnSync('test', ['-x', path]).status !== 0).map(([pkg]) => pkg);
  if (missing.length === 0) return;
  process.stderr.write(`Installing ${missing.join(', ')} (apt-get)…\n`);
  const run = (args: string[]) =>
    spawnSync('apt-get', args, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }, timeout: 600_000 });
  if (run(['install', '-y', ...missing]).status !== 0) {
    run(['update']);
    if (run(['install', '-y', ...missing]).status !== 0) throw new Error(`apt-get could not install ${missing.join(', ')}`);
  }
}

function waitForPort(port: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      const socket = connect(port, HOST);
      socket.once('connect', () => {
        socket.destroy();
        resolve();
      });
      socket.once('error', () => {
        socket.destroy();
        if (Date.now() > deadline) reject(new Error(`nothing listens on ${HOST}:${port} after ${timeoutMs} ms`));
        else setTimeout(attempt, 100);
      });
    };
    attempt();
  });
}

async function onDatabase<T>(url: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function api(base: string, headers: Record<string, string>, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path} answered ${res.status}: ${text.slice(0, 400)}`);
  return text ? JSON.parse(text) : null;
}

/** The cluster, up and seeded; whatever it started is stopped again when a step fails. */
export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const started: Child[] = [];
  try {
    return await buildCluster(options, started);
  } catch (err) {
    await Promise.all(started.map((child) => stopChild(child)));
    throw err;
  }
}

async function buildCluster(options: ClusterOptions, started: Child[]): Promise<Cluster> {
  const startChild = (...args: Parameters<typeof startProcess>): Child => {
    const child = startProcess(...args);
    started.push(child);
    return child;
  };
  ensurePackages();
  const count = options.replicas ?? 3;
  const owner = postgresUser();
  const real = realServerArgs();

  // PostgreSQL: a cluster of its own, owned by the postgres user (initdb and postgres refuse root).
  const pgDir = tempDir('cp-scale-pg-');
  chownSync(pgDir, owner.uid, owner.gid);
  const pgData = join(pgDir, 'data');
  const initdb = spawnSync(`${PG_BIN}/initdb`, ['-D', pgData, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-instructions'], {
    uid: owner.uid,
    gid: owner.gid,
    cwd: pgDir,
    encoding: 'utf8',
  });
  if (initdb.status !== 0) throw new Error(`initdb failed: ${initdb.stderr}`);
  const pgPort = await freePort();
  let postgres = null as Child | null;
  const startPostgres = async () => {
    postgres = startChild(
      'PostgreSQL',
      ['-D', pgData, '-p', String(pgPort), '-h', HOST, '-k', pgDir, '-c', 'max_connections=200', '-c', 'shared_buffers=64MB'],
      { LANG: 'C' },
      'ignore',
      { command: `${PG_BIN}/postgres`, uid: owner.uid, gid: owner.gid, cwd: pgDir, stopSignal: 'SIGINT' },
    );
    await waitForPort(pgPort);
    // Accepting connections comes a moment after the port opens (recovery, start-up).
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        await onDatabase(`postgres://postgres@${HOST}:${pgPort}/postgres`, (c) => c.query('select 1'));
        return;
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  await startPostgres();
  const directUrl = `postgres://postgres@${HOST}:${pgPort}/${DATABASE}`;
  await onDatabase(`postgres://postgres@${HOST}:${pgPort}/postgres`, async (c) => {
    await c.query(`create database ${DATABASE}`);
    // What `options=-c TimeZone=UTC -c statement_timeout=30000` would have said, had PgBouncer passed it on.
    await c.query(`alter database ${DATABASE} set timezone = 'UTC'`);
    await c.query(`alter database ${DATABASE} set statement_timeout = '30s'`);
  });

  // PgBouncer in transaction mode; refuses to run as root.
  const bouncerPort = await freePort();
  const bouncerIni = join(pgDir, 'pgbouncer.ini');
  writeFileSync(
    bouncerIni,
    [
      '[databases]',
      `${DATABASE} = host=${HOST} port=${pgPort} dbname=${DATABASE}`,
      '[pgbouncer]',
      `listen_addr = ${HOST}`,
      `listen_port = ${bouncerPort}`,
      `unix_socket_dir =`,
      'auth_type = trust',
      `auth_file = ${join(pgDir, 'userlist.txt')}`,
      'pool_mode = transaction',
      'max_client_conn = 500',
      'default_pool_size = 40',
      'ignore_startup_parameters = extra_float_digits,options',
      // A query queued for a server connection while PostgreSQL is away fails after 5 s (a 503 at
      // the app) instead of the default 120 s, which no timeout of the app's can shorten.
      'query_wait_timeout = 5',
      // SHOW POOLS on the admin console, for the soak's samples.
      'stats_users = postgres',
      'server_reset_query =',
      'logfile =',
      '',
    ].join('\n'),
  );
  writeFileSync(join(pgDir, 'userlist.txt'), '"postgres" ""\n');
  chownSync(bouncerIni, owner.uid, owner.gid);
  chownSync(join(pgDir, 'userlist.txt'), owner.uid, owner.gid);
  const bouncer = startChild('PgBouncer', [bouncerIni], {}, 'ignore', {
    command: '/usr/sbin/pgbouncer',
    uid: owner.uid,
    gid: owner.gid,
    cwd: pgDir,
    stopSignal: 'SIGINT',
  });
  await waitForPort(bouncerPort);
  const bouncerUrl = `postgres://postgres@${HOST}:${bouncerPort}/${DATABASE}`;

  // Redis of its own: nothing saved.
  const redisPort = await freePort();
  let redis = null as Child | null;
  const startRedis = async () => {
    redis = startChild('Redis', ['--port', String(redisPort), '--bind', HOST, '--save', '', '--appendonly', 'no', '--dir', pgDir], {}, 'ignore', {
      command: '/usr/bin/redis-server',
    });
    await waitForPort(redisPort);
  };
  await startRedis();
  const redisUrl = `redis://${HOST}:${redisPort}`;

  // The upstream MCP server.
  const upstreamKey = `scale-${randomBytes(8).toString('hex')}`;
  const peers = startChild(
    'the upstream MCP server',
    tsxArgs('scripts/bench/upstream-peers.ts'),
    { NODE_ENV: 'production', BENCH_CONNECTIONS: '1', BENCH_TOOLS: '5', BENCH_UPSTREAM_KEY: upstreamKey },
    'pipe',
  );
  const { urls } = JSON.parse(await firstLine(peers)) as { urls: string[] };
  const upstreamUrl = `${new URL(urls[0]!).origin}/mcp`;

  const receiver = await startHttpReceiver();
  atCleanup(() => receiver.close());

  // HAProxy's port first: every replica's BASE_URL is the balancer's.
  const lbPort = await freePort();
  const lbUrl = `http://${HOST}:${lbPort}`;
  const encryptionKey = randomBytes(32).toString('hex');
  const cliDir = tempDir('cp-scale-cli-');
  const replicas: Replica[] = [];
  for (let i = 0; i < count; i += 1) {
    const port = await freePort();
    const metricsPort = await freePort();
    replicas.push({
      index: i,
      port,
      metricsPort,
      url: `http://${HOST}:${port}`,
      metricsUrl: `http://${HOST}:${metricsPort}`,
      dataDir: tempDir(`cp-scale-r${i}-`),
      child: null,
    });
  }
  const logDir = mkdtempSync(join(tmpdir(), 'cp-scale-logs-'));
  const replicaEnv = (r: Replica): Record<string, string> => ({
    NODE_ENV: 'production',
    HOST,
    PORT: String(r.port),
    METRICS_PORT: String(r.metricsPort),
    BASE_URL: lbUrl,
    DATA_DIR: r.dataDir,
    DATABASE_URL: bouncerUrl,
    DATABASE_LISTEN_URL: directUrl,
    DATABASE_PREPARED_STATEMENTS: 'false',
    ENCRYPTION_KEY: encryptionKey,
    REDIS_URL: redisUrl,
    RATE_LIMIT_STORE: 'redis',
    RATE_LIMIT_REQUESTS: '10000000',
    TRUST_PROXY: 'loopback',
    OUTBOUND_ALLOW_LOOPBACK: 'true',
    SLACK_WEBHOOK_HOSTS: HOST,
    CONNECTION_TOOLS_TTL_SECONDS: '3600',
    // The first replica bootstraps the empty database; the file it writes holds the token.
    AUTO_BOOTSTRAP: r.index === 0 ? 'true' : 'false',
    ...options.env,
  });
  const startReplica = async (i: number) => {
    const r = replicas[i]!;
    if (r.child && r.child.exitCode === undefined) throw new Error(`replica ${i} is running`);
    r.child = startChild(`replica ${i}`, real.args, replicaEnv(r), 'pipe');
    // Its log, kept after the run (every start appends): what a BROKEN scenario's replica said.
    const log = join(logDir, `r${i}.log`);
    r.child.process.stdout?.pipe(createWriteStream(log, { flags: 'a' }));
    try {
      await waitUntilUp(r.child, `${r.metricsUrl}/ready`);
    } catch (err) {
      throw new Error(`${(err as Error).message}\n(its log: ${log})`, { cause: err });
    }
  };
  // One after the other: the first migrates and bootstraps, and on two loaded cores replicas
  // starting together can miss the start-up deadline.
  for (const r of replicas) await startReplica(r.index);
  const bootstrap = JSON.parse(readFileSync(join(replicas[0]!.dataDir, 'bootstrap.json'), 'utf8')) as {
    organization_id: string;
    user_id: string;
    api_token: string;
  };

  const haDir = tempDir('cp-scale-haproxy-');
  const haSocket = join(haDir, 'admin.sock');
  writeFileSync(
    join(haDir, 'haproxy.cfg'),
    [
      'global',
      `  stats socket ${haSocket} mode 600 level admin`,
      '  maxconn 2000',
      // One thread: on the two cores this machine shares between everything, a second one only
      // takes cycles from the replicas.
      '  nbthread 1',
      'defaults',
      '  mode http',
      '  timeout connect 2s',
      '  timeout client 60s',
      '  timeout server 60s',
      '  timeout http-keep-alive 30s',
      '  option redispatch',
      '  retries 2',
      'frontend api',
      `  bind ${HOST}:${lbPort}`,
      '  option forwardfor',
      // HAProxy's own 503 (every replica down) says when to retry, as the replicas' 503s do.
      '  http-after-response set-header Retry-After 5 if { status 503 } !{ res.hdr(retry-after) -m found }',
      '  default_backend replicas',
      'backend replicas',
      '  balance roundrobin',
      '  option httpchk GET /ready',
      '  http-check expect status 200',
      '  timeout check 2s',
      '  default-server inter 1s fall 3 rise 2',
      ...replicas.map((r) => `  server r${r.index} ${HOST}:${r.port} check port ${r.metricsPort}`),
      '',
    ].join('\n'),
  );
  const haproxy = startChild('HAProxy', ['-f', join(haDir, 'haproxy.cfg'), '-db'], {}, 'ignore', { command: '/usr/sbin/haproxy', cwd: haDir });
  await waitForPort(lbPort);

  const backendStatus = (): Promise<Record<string, string>> =>
    new Promise((resolve, reject) => {
      const socket = connect(haSocket);
      let text = '';
      socket.on('data', (c) => (text += c.toString('utf8')));
      socket.on('error', reject);
      socket.on('end', () => {
        const lines = text.split('\n');
        const header = (lines[0] ?? '').replace(/^# /, '').split(',');
        const [px, sv, st] = ['pxname', 'svname', 'status'].map((h) => header.indexOf(h)) as [number, number, number];
        const out: Record<string, string> = {};
        for (const line of lines.slice(1)) {
          const f = line.split(',');
          if (f[px] === 'replicas' && f[sv] && f[sv] !== 'BACKEND') out[f[sv]] = f[st] ?? '';
        }
        resolve(out);
      });
      socket.write('show stat\n');
    });
  // Every replica seen up by the balancer before any load.
  const deadline = Date.now() + 30_000;
  while (Object.values(await backendStatus()).filter((s) => s === 'UP').length < count) {
    if (Date.now() > deadline) throw new Error(`HAProxy does not see every replica up: ${JSON.stringify(await backendStatus())}`);
    await new Promise((r) => setTimeout(r, 200));
  }

  // Seeding through the API, but for the connector to loopback (the API refuses private URLs).
  const headers = { authorization: `Bearer ${bootstrap.api_token}`, 'x-organization-id': bootstrap.organization_id, 'content-type': 'application/json' };
  const slug = 'scale-upstream';
  const seedDb = await openDatabase({ url: directUrl, poolSize: 1 });
  try {
    await addApiKeyConnector(seedDb.db, bootstrap.organization_id, slug, 'Scale upstream', upstreamUrl);
  } finally {
    await seedDb.close();
  }
  await api(lbUrl, headers, 'POST', '/connection', { connector_slug: slug, api_key: upstreamKey });
  const mcp = await api(lbUrl, headers, 'POST', '/user-toolbox/utbx_dyn_all/mcp', { name: 'Scale load' });
  const mcpServerId: string = mcp.id ?? mcp.mcp_server?.id;
  const mcpToken: string = mcp.token;
  if (!mcpServerId || !mcpToken) throw new Error(`createMcpServer answered without id or token: ${JSON.stringify(mcp).slice(0, 300)}`);
  const webhookPath = `/services/T${randomBytes(4).toString('hex')}/B${randomBytes(4).toString('hex')}/${randomBytes(6).toString('hex')}`;
  await api(lbUrl, headers, 'POST', '/notification-destination', {
    name: 'Scale webhook',
    type: 'slack',
    config: { webhook_url: `${receiver.url}${webhookPath}` },
    event_types: ['role.created', 'role.updated', 'role.deleted'],
  });

  const cluster: Cluster = {
    lbUrl,
    replicas,
    directUrl,
    bouncerUrl,
    redisUrl,
    upstreamUrl,
    upstreamKey,
    receiver,
    seed: {
      orgId: bootstrap.organization_id,
      userId: bootstrap.user_id,
      token: bootstrap.api_token,
      mcpServerId,
      mcpToken,
      echoTool: `${slug}__echo`,
      webhookPath,
    },
    headers,
    startReplica,
    stopReplica: async (i) => {
      const child = replicas[i]!.child;
      if (child) await stopChild(child);
    },
    killReplica: async (i) => {
      const child = replicas[i]!.child;
      if (!child || child.exitCode !== undefined) return;
      child.process.kill('SIGKILL');
      await child.exited;
    },
    restartReplica: async (i) => {
      const child = replicas[i]!.child;
      if (child) await stopChild(child);
      await startReplica(i);
    },
    stopPostgres: async () => {
      if (postgres) await stopChild(postgres);
    },
    startPostgres,
    stopRedis: async () => {
      if (redis) await stopChild(redis);
    },
    startRedis,
    backendStatus,
    cli: async (args) => {
      const { stdout } = await execFileAsync(process.execPath, [...tsxArgs('scripts/cli.ts'), ...args, '--json'], {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH ?? '',
          HOME: process.env.HOME ?? '',
          DATABASE_URL: directUrl,
          ENCRYPTION_KEY: encryptionKey,
          DATA_DIR: cliDir,
          BASE_URL: lbUrl,
        },
        timeout: 60_000,
      });
      return JSON.parse(stdout);
    },
    query: (text, values) => onDatabase(directUrl, async (c) => (await c.query(text, values)).rows),
    stop: async () => {
      await Promise.all(replicas.map((r) => (r.child ? stopChild(r.child) : undefined)));
      for (const child of [haproxy, peers, bouncer, redis, postgres]) if (child) await stopChild(child);
      await receiver.close();
    },
  };
  return cluster;
}
