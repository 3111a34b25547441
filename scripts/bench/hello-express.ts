// The benchmark's baseline: a bare Express 5 server answering one small JSON body.
// Run by scripts/bench/run.ts as its own process; listens on 127.0.0.1:$PORT.
import express from 'express';

const port = Number(process.env.PORT ?? 0);
const app = express();
app.get('/', (_req, res) => {
  res.json({ hello: 'world' });
});

const server = app.listen(port, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening on ${typeof address === 'object' && address ? address.port : port}\n`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
