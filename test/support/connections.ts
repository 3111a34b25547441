import type { components } from '../../generated/openapi';
import { settle, type TestApp } from './app';

type Schemas = components['schemas'];

/** The ten connection operations through the typed client, acting as one caller. */
export function connectionClient(app: TestApp, credential: { token?: string; session?: string; org?: string }) {
  const api = app.client(credential);
  const item = (id: string) => ({ params: { path: { id } } });
  return {
    ...app.as(credential),
    list: (query: { limit?: number; cursor?: string; connector_slug?: string; status?: Schemas['ConnectionStatus']; owner_user_id?: string } = {}) =>
      settle(api.GET('/connection', { params: { query } })),
    create: (body: Schemas['ConnectionCreate']) => settle(api.POST('/connection', { body })),
    read: (id: string) => settle(api.GET('/connection/{id}', item(id))),
    rename: (id: string, name: string) => settle(api.PATCH('/connection/{id}', { ...item(id), body: { name } })),
    remove: (id: string) => settle(api.DELETE('/connection/{id}', item(id))),
    reconnect: (id: string, body?: Schemas['ConnectionReconnect']) =>
      settle(api.POST('/connection/{id}/reconnect', { ...item(id), ...(body ? { body } : {}) })),
    tools: (id: string, query: { limit?: number; cursor?: string } = {}) => settle(api.GET('/connection/{id}/tools', { params: { path: { id }, query } })),
    transfer: (id: string, userId: string) => settle(api.POST('/connection/{id}/transfer', { ...item(id), body: { user_id: userId } })),
    accept: (id: string) => settle(api.POST('/connection/{id}/accept', item(id))),
  };
}
export type ConnectionClient = ReturnType<typeof connectionClient>;

export { expectError } from './client';

/** The events of one type an organization's outbox holds, oldest first. */
export async function eventsOf(t: TestApp, orgId: string, type: string) {
  const rows = await t.db
    .selectFrom('outbox')
    .select(['event_type', 'payload', 'actor_type', 'actor_id'])
    .where('org_id', '=', orgId)
    .where('event_type', '=', type)
    .orderBy('id')
    .execute();
  return rows.map((row) => ({ ...row, payload: row.payload as Record<string, any> }));
}

/** Every tool name, walking every page of GET /connection/{id}/tools. */
export async function allToolNames(client: ConnectionClient, id: string, limit = 50): Promise<string[]> {
  const names: string[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < 100; i += 1) {
    const res = await client.tools(id, { limit, ...(cursor ? { cursor } : {}) });
    if (res.status !== 200) throw new Error(`tools: ${res.status} ${res.text}`);
    names.push(...res.body.data.map((tool: { name: string }) => tool.name));
    cursor = res.body.next_cursor ?? undefined;
    if (!cursor) return names;
  }
  throw new Error('tools: too many pages');
}
