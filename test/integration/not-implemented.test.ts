// Every operation of the contract that is not built yet answers 501 not_implemented, whatever
// its security scheme or media type, so the gap is visible to every client.
import { operations, type OperationId } from '../../generated/operations';
import { serviceRegistry } from '../../src/modules';
import { startTestApp, type TestApp } from '../support/app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const { notImplemented } = serviceRegistry();
const pending = [...notImplemented].map((id) => [id, operations[id as OperationId]] as const);

describe('operations not built yet', () => {
  it('exist', () => {
    expect(pending.length).toBeGreaterThan(0);
  });

  it.each(pending)('%s answers 501 not_implemented', async (id, meta) => {
    const path = meta.path.replace(/\{[^}]+\}/g, 'x');
    const res = await t.call(meta.method.toUpperCase(), path);
    expect([res.status, res.body?.code]).toEqual([501, 'not_implemented']);
    expect(res.body.detail).toContain(id);
  });
});
