// Checked by `make typecheck`, never run: each @ts-expect-error line must stay an error, so
// the generated types keep refusing what the spec refuses, for SDK users and for our tests.
import createClient from 'openapi-fetch';
import type { paths } from '../../generated/openapi';
import type { ApiClient } from '../support/app';

export async function sdkClient(): Promise<void> {
  const client = createClient<paths>({ baseUrl: 'http://127.0.0.1:8080' });
  // @ts-expect-error -- no such path in the contract
  await client.GET('/no-such-path');
  await client.POST('/notification-destination', {
    params: { header: { 'X-Organization-Id': 'org_01jg3b7f0k2q8yq9w6r1c4d5e6' } },
    // @ts-expect-error -- `type` must be slack or email
    body: { name: 'x', type: 'pager', config: {}, event_types: [] },
  });
  // @ts-expect-error -- the organization header is required
  await client.GET('/notification-destination', {});
}

export async function harnessClient(client: ApiClient): Promise<void> {
  // The harness sends the organization itself, so the header may be left out …
  await client.GET('/notification-destination', {});
  // … but paths, path parameters and bodies are still the spec's.
  // @ts-expect-error -- no such path in the contract
  await client.GET('/notification-destinations');
  // @ts-expect-error -- the id is a required path parameter
  await client.GET('/notification-destination/{id}', {});
  // @ts-expect-error -- a member of the wrong type
  await client.PATCH('/notification-destination/{id}', { params: { path: { id: 'onfd_x' } }, body: { is_active: 'yes' } });
}

export async function opClient(t: import('../support/app').TestApp, org: { orgId: string; token: string }): Promise<void> {
  const created = await t.as(org).op('createTeam', { body: { name: 'Platform' } });
  // The body is the operation's 2xx schema (Team) …
  const id: string = created.body.id;
  await t.op('getTeam', { params: { id } }, org);
  await t.as(org).op('listTeams', { query: { limit: 5 } });
  // @ts-expect-error -- no such operation
  await t.as(org).op('createTeams', { body: { name: 'x' } });
  // @ts-expect-error -- a member of the wrong type
  await t.as(org).op('createTeam', { body: { name: 7 } });
  // @ts-expect-error -- the id is a required path parameter
  await t.as(org).op('getTeam', { params: {} });
  // @ts-expect-error -- no such query parameter
  await t.as(org).op('listTeams', { query: { colour: 'red' } });
  // @ts-expect-error -- … so a member it does not have does not compile
  void created.body.colour;
}
