// `npx tsx scripts/bench/metrics.ts`: what the metrics add to each request, in process (no I/O).
//
//   request       Metrics.request: the request counter and the latency histogram, as the request
//                 log calls it when a response ends, over 300 operations.
//   rate limit    RateLimits.caller on the memory store, with and without onRefused (the wrapper
//                 that counts refusals).
//   scrape        Metrics.scrape: the text format with every operation observed (the database's
//                 lag read stubbed to 0: only the rendering is timed).
//
// Settings: BENCH_COUNT calls per figure (default 1,000,000 for the first two).
import { RateLimits } from '../../src/http/rate-limit';
import { Metrics } from '../../src/lib/metrics';

const COUNT = Math.max(1000, Number(process.env.BENCH_COUNT ?? 1_000_000));
const OPERATIONS = Array.from({ length: 300 }, (_, i) => `operation${i}`);

function time(label: string, count: number, run: (i: number) => void): void {
  for (let i = 0; i < Math.min(count, 10_000); i++) run(i);
  const started = process.hrtime.bigint();
  for (let i = 0; i < count; i++) run(i);
  const ns = Number(process.hrtime.bigint() - started) / count;
  console.log(`${label.padEnd(34)} ${ns.toFixed(0).padStart(8)} ns per call`);
}

async function main(): Promise<void> {
  const metrics = new Metrics({ outboxLagSeconds: async () => 0 });
  time('request (counter + histogram)', COUNT, (i) => metrics.request(OPERATIONS[i % 300], i % 10 === 0 ? 404 : 200, false, 0.003));
  const caller = { kind: 'api_token', tokenId: 'tok_1' } as never;
  const plain = new RateLimits({ points: 1e12, durationSeconds: 60, authFailures: 10, store: { kind: 'memory' } });
  const counted = new RateLimits({ points: 1e12, durationSeconds: 60, authFailures: 10, store: { kind: 'memory' }, onRefused: (b) => metrics.refused(b) });
  time('rate limit, caller (no onRefused)', COUNT, () => plain.caller(caller));
  time('rate limit, caller (onRefused)', COUNT, () => counted.caller(caller));
  const scrapes = 200;
  const started = process.hrtime.bigint();
  let bytes = 0;
  for (let i = 0; i < scrapes; i++) bytes = (await metrics.scrape()).body.length;
  console.log(
    `${'scrape (300 operations)'.padEnd(34)} ${(Number(process.hrtime.bigint() - started) / scrapes / 1e6).toFixed(2).padStart(8)} ms per scrape, ${bytes} bytes`,
  );
}

void main();
