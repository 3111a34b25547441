// The server compiles an operation's validators on its first request. This compiles all of
// them at once, so a schema Ajv refuses fails here rather than on some client's first call.
import { handlers, notImplemented } from '../../src/areas';
import { loadConfig } from '../../src/config';
import { createOperationRouter } from '../../src/http/api';
import type { AppDeps } from '../../src/http/context';
import { loadSpec } from '../../src/spec';

it('compiles the request, response and header validators of every operation', async () => {
  const deps = { config: loadConfig({ ENCRYPTION_KEY: 'a'.repeat(64), NODE_ENV: 'test' }) } as unknown as AppDeps;
  const router = await createOperationRouter(deps, { spec: loadSpec(), handlers, notImplemented });
  expect(() => router.compileAll()).not.toThrow();
  expect(router.operationCount).toBeGreaterThan(200);
}, 120_000);
