// The server compiles an operation's validators on its first request. This compiles all of
// them at once, so a schema Ajv refuses fails here rather than on some client's first call.
import { CredentialCache } from '../../src/identity/credential-cache';
import { loadConfig } from '../../src/config';
import type { AppDeps } from '../../src/http/context';
import { createOperationRouter } from '../../src/http/operation-router';
import { RateLimits } from '../../src/http/rate-limit';
import { buildRegistry } from '../../src/http/registry';
import { loadSpec } from '../../src/spec';
import { describeOperations } from '../../src/spec/operations';

it('compiles the request, response and header validators of every operation', async () => {
  const deps = { config: loadConfig({ ENCRYPTION_KEY: 'a'.repeat(64), NODE_ENV: 'test' }) } as unknown as AppDeps;
  const spec = loadSpec();
  const { operations } = describeOperations(spec);
  const limits = new RateLimits({ ...deps.config.rateLimit, store: { kind: 'memory' } });
  const router = await createOperationRouter(deps, {
    spec,
    operations,
    registry: buildRegistry([], operations, []),
    limits,
    credentials: new CredentialCache(),
  });
  expect(() => router.compileAll()).not.toThrow();
}, 120_000);
