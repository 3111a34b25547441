// A client generated the way SDK consumers generate one (openapi-typescript types through
// openapi-fetch) compiles against generated/openapi.d.ts and talks to the running server.
// This test checks the calls; test/types/typed-client.types.ts proves, under `make typecheck`,
// that the types refuse what the spec refuses.
import createClient from 'openapi-fetch';
import type { paths } from '../../generated/openapi';
import { startTestApp, type TestApp } from '../support/app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('an openapi-fetch client typed by the generated paths', () => {
  it('reads, creates and deletes through typed calls', async () => {
    const { orgId, token } = await t.factories.org();
    const client = createClient<paths>({ baseUrl: t.url, headers: { authorization: `Bearer ${token}` } });

    const health = await client.GET('/health');
    expect(health.data?.ok).toBe(true);

    const me = await client.GET('/user/me', { params: { query: { current_org_id: orgId } } });
    expect(me.error).toBeUndefined();
    expect(me.data?.organizations.map((o) => o.organization.id)).toEqual([orgId]);

    const created = await client.POST('/notification-destination', {
      params: { header: { 'X-Organization-Id': orgId } },
      body: { name: 'Typed', type: 'email', config: { to: ['ops@acme.example'] }, event_types: ['member.joined'] },
    });
    expect(created.response.status).toBe(201);
    const id = created.data!.id;
    expect(id).toMatch(/^onfd_/);

    const read = await client.GET('/notification-destination/{id}', { params: { header: { 'X-Organization-Id': orgId }, path: { id } } });
    expect(read.data?.name).toBe('Typed');

    const removed = await client.DELETE('/notification-destination/{id}', { params: { header: { 'X-Organization-Id': orgId }, path: { id } } });
    expect(removed.response.status).toBe(204);

    const gone = await client.GET('/notification-destination/{id}', { params: { header: { 'X-Organization-Id': orgId }, path: { id } } });
    expect(gone.response.status).toBe(404);
    expect(gone.error?.code).toBe('not_found');
  });
});
