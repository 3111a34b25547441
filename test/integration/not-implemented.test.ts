// An operation of the contract that no module serves answers 501 not_implemented, whatever its
// security scheme or media type, so a gap is visible to every client. Every operation of the
// service is built today, so the app here runs the service's modules with a few handlers
// withheld: one of each kind (org-scoped JSON, multipart upload, person-only, public protocol).
import { operations, type OperationId } from '../../generated/operations';
import type { Module } from '../../src/http/area';
import { MODULES } from '../../src/modules';
import { startTestApp, type TestApp } from '../support/app';

const WITHHELD: readonly OperationId[] = ['listTeams', 'uploadFile', 'listSecurityEvents', 'getOAuthJwks'];

function withheld(module: Module): Module {
  const handlers = { ...module.handlers } as Record<string, unknown>;
  for (const id of WITHHELD) delete handlers[id];
  return { ...module, handlers: handlers as Module['handlers'] };
}

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ modules: MODULES.map(withheld) });
});
afterAll(() => t.close());

describe('operations nobody serves', () => {
  it('are the ones withheld, and the registry says so', () => {
    expect([...t.pending].sort()).toEqual([...WITHHELD].sort());
  });

  it.each(WITHHELD.map((id) => [id, operations[id]] as const))('%s answers 501 not_implemented', async (id, meta) => {
    const path = meta.path.replace(/\{[^}]+\}/g, 'x');
    const res = await t.call(meta.method.toUpperCase(), path);
    expect([res.status, res.body?.code]).toEqual([501, 'not_implemented']);
    expect(res.body.detail).toContain(id);
  });
});
