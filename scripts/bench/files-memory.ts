// `NODE_OPTIONS=--expose-gc npx tsx scripts/bench/files-memory.ts`: how much memory one tool
// file transfer takes, by size, on both storage backends: an upload (`POST /file`,
// multipart), a staged upload (`PUT /file/upload-request/{id}/file/{file_id}`, raw bytes of
// the reserved size) and a download (`GET /file/{id}/content`), one at a time through the app
// on loopback. Streaming holds: the figures stay flat as the file grows from 1 to 50 MiB.
//
// The client streams too (bytes generated a 64 KiB block at a time, the download hashed as
// it arrives), so what grows is the server's. The heap, external memory and RSS are sampled
// every 100 ms during each transfer, each time after a full GC when --expose-gc is given (so
// the figure is what the transfer holds live, not garbage a GC has not reached yet); the
// figure is the peak above the level just before it. A 1 MiB round runs first, unreported,
// so that loading and compiling the code paths is not counted. The S3-compatible server (s3rver) runs in a child
// process, so its memory is not counted. BENCH_SIZES_MIB overrides the sizes (`1,20,50`).
// A control row reads the same bytes whole (Storage.get, a Buffer): what buffering would cost.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { storageOf } from '../../src/lib/storage';
import { startBenchApp, type BenchApp } from './support';

const MiB = 1024 * 1024;
const SIZES = (process.env.BENCH_SIZES_MIB ?? '1,20,50').split(',').map((s) => Number(s.trim()));
const BLOCK = randomBytes(64 * 1024);

/** `size` bytes, a block at a time: nothing of the file exists whole on the client either. */
function generated(size: number): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= size) return this.push(null);
      const n = Math.min(BLOCK.length, size - sent);
      sent += n;
      this.push(n === BLOCK.length ? BLOCK : BLOCK.subarray(0, n));
    },
  });
}

function expectedSha(size: number): string {
  const hash = createHash('sha256');
  for (let sent = 0; sent < size; sent += BLOCK.length) hash.update(BLOCK.subarray(0, Math.min(BLOCK.length, size - sent)));
  return hash.digest('hex');
}

interface Answer {
  status: number;
  body: string;
  sha256: string;
  bytes: number;
}

/** A request whose body is a stream; a JSON answer is kept as text, any other is hashed as it arrives. */
function send(base: string, method: string, path: string, headers: Record<string, string | number>, body?: Readable): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${path}`, { method, headers }, (res) => {
      const hash = createHash('sha256');
      const text: Buffer[] = [];
      let bytes = 0;
      const json = (res.headers['content-type'] ?? '').includes('json');
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (json) text.push(chunk);
        else hash.update(chunk);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(text).toString(), sha256: hash.digest('hex'), bytes }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (body) body.pipe(req);
    else req.end();
  });
}

interface Peak {
  heap: number;
  external: number;
  rss: number;
}

/** Runs `transfer`, sampling memory; the peaks above the level before it. */
async function sampled(transfer: () => Promise<void>): Promise<Peak> {
  (globalThis as { gc?: () => void }).gc?.();
  const start = process.memoryUsage();
  const peak = { heap: 0, external: 0, rss: 0 };
  const gc = (globalThis as { gc?: () => void }).gc;
  const sample = () => {
    // Collected first: what is left is what the transfer holds, not garbage awaiting a GC.
    gc?.();
    const now = process.memoryUsage();
    peak.heap = Math.max(peak.heap, now.heapUsed - start.heapUsed);
    peak.external = Math.max(peak.external, now.external - start.external);
    peak.rss = Math.max(peak.rss, now.rss - start.rss);
  };
  const timer = setInterval(sample, 100);
  try {
    await transfer();
  } finally {
    clearInterval(timer);
    sample();
  }
  return peak;
}

const mib = (bytes: number) => `${(bytes / MiB).toFixed(1).padStart(6)} MiB`;

async function startS3rver(): Promise<{ child: ChildProcess; port: number; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-s3rver-'));
  const script = `
    const S3rver = require('s3rver');
    new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: ${JSON.stringify(dir)}, configureBuckets: [{ name: 'bench', configs: [] }] })
      .run().then(({ port }) => process.stdout.write(port + '\\n'));`;
  const child = spawn(process.execPath, ['-e', script], { cwd: join(__dirname, '..', '..'), stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout?.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
    child.once('exit', (code) => reject(new Error(`s3rver exited with ${code}`)));
  });
  return { child, port, dir };
}

async function run(backend: 'disk' | 's3'): Promise<void> {
  let s3: Awaited<ReturnType<typeof startS3rver>> | null = null;
  const env: Record<string, string> = { FILE_MAX_BYTES: String(Math.max(...SIZES) * MiB), FILE_SWEEP_INTERVAL_MS: '0' };
  if (backend === 's3') {
    s3 = await startS3rver();
    Object.assign(env, {
      STORAGE_BACKEND: 's3',
      S3_BUCKET: 'bench',
      S3_ENDPOINT: `http://127.0.0.1:${s3.port}`,
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
    });
  }
  let app: BenchApp | null = null;
  try {
    app = await startBenchApp(env);
    const org = await app.factories.org();
    const auth = { authorization: `Bearer ${org.token}`, 'x-organization-id': org.orgId };
    console.log(`\n${backend} storage (peak above the level before each transfer: heap / external / RSS)`);
    for (const [round, size] of [0.25, ...SIZES].map((s, i) => [i, s * MiB] as const)) {
      const report = round > 0;
      const sha = expectedSha(size);

      // POST /file: multipart, the file part streamed between a preamble and an epilogue.
      const boundary = `bench${randomBytes(8).toString('hex')}`;
      const head = Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      );
      const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
      let uploaded: Answer | null = null;
      const up = await sampled(async () => {
        const body = Readable.from(
          (async function* () {
            yield head;
            yield* generated(size);
            yield tail;
          })(),
        );
        uploaded = await send(
          app!.base,
          'POST',
          '/file',
          { ...auth, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': head.length + size + tail.length },
          body,
        );
      });
      const file = JSON.parse((uploaded as Answer | null)?.body ?? '{}') as { id: string; sha256: string };
      if ((uploaded as Answer | null)?.status !== 201 || file.sha256 !== sha)
        throw new Error(`upload answered ${(uploaded as Answer | null)?.status}: ${(uploaded as Answer | null)?.body}`);

      // Reserve, then PUT the raw bytes.
      const ask = await send(
        app.base,
        'POST',
        '/file/upload-request',
        { ...auth, 'content-type': 'application/json' },
        Readable.from([JSON.stringify({ assignee_user_id: org.ownerId })]),
      );
      const request = JSON.parse(ask.body) as { id: string };
      const place = await send(
        app.base,
        'POST',
        `/file/upload-request/${request.id}/file`,
        { ...auth, 'content-type': 'application/json' },
        Readable.from([JSON.stringify({ name: 'bench.bin', content_type: 'application/octet-stream', size_bytes: size })]),
      );
      const staged = JSON.parse(place.body) as { upload_url: string };
      let put: Answer | null = null;
      const raw = await sampled(async () => {
        put = await send(app!.base, 'PUT', staged.upload_url, { ...auth, 'content-type': 'application/octet-stream', 'content-length': size }, generated(size));
      });
      if ((put as Answer | null)?.status !== 200) throw new Error(`PUT answered ${(put as Answer | null)?.status}: ${(put as Answer | null)?.body}`);

      let got: Answer | null = null;
      const down = await sampled(async () => {
        got = await send(app!.base, 'GET', `/file/${file.id}/content`, auth);
      });
      if ((got as Answer | null)?.sha256 !== sha || (got as Answer | null)?.bytes !== size) throw new Error('the download is not the bytes uploaded');

      if (!report) continue;
      // The control: the same bytes read whole (the Buffer method organization logos use), as a buffering server would.
      const key = (await app.database.db.selectFrom('tool_files').select('storage_key').where('id', '=', file.id).executeTakeFirstOrThrow())
        .storage_key as string;
      let whole: Buffer | null = null;
      const buffered = await sampled(async () => {
        whole = await storageOf(app!.deps.config).get(key);
      });
      if ((whole as Buffer | null)?.length !== size) throw new Error('the control read the wrong bytes');
      whole = null;
      for (const [what, peak] of [
        ['upload (multipart)', up],
        ['staged PUT (raw)', raw],
        ['download', down],
        ['control: read whole', buffered],
      ] as const) {
        console.log(`  ${String(size / MiB).padStart(3)} MiB ${what.padEnd(19)} heap ${mib(peak.heap)}  external ${mib(peak.external)}  RSS ${mib(peak.rss)}`);
      }
    }
  } finally {
    await app?.close();
    s3?.child.kill();
    if (s3) rmSync(s3.dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  if (!(globalThis as { gc?: () => void }).gc) console.log('(run with NODE_OPTIONS=--expose-gc for steadier figures)');
  await run('disk');
  await run('s3');
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
