/**
 * Real upstream MCP servers on loopback for tests (see test/support/upstream/):
 * - startApiKeyUpstream: the SDK's server behind API keys (header or query), Streamable HTTP and SSE;
 * - startOAuthUpstream: the same behind its own OAuth authorization server (9728, 8414, 7591, PKCE, 7009);
 * - startEverythingServer: the published reference server @modelcontextprotocol/server-everything.
 */
export { manyTools, type Caller, type SeenRequest, type Transport, type UpstreamTool } from './upstream/mcp';
export type { UpstreamPeer } from './upstream/server';
export { startApiKeyUpstream, BEARER_HEADER, type ApiKeyUpstream, type ApiKeyUpstreamOptions, type KeyPlacement } from './upstream/api-key';
export {
  startOAuthUpstream,
  type OAuthUpstream,
  type OAuthUpstreamOptions,
  type OAuthClientRecord,
  type AuthorizeRequestRecord,
  type TokenRequestRecord,
  type RevocationRecord,
} from './upstream/oauth';
export { startEverythingServer, freePort, type EverythingServer } from './upstream/everything';

/**
 * Starts a peer before the file's tests and closes it after them:
 * `const up = useUpstream(() => startApiKeyUpstream({ keys }))`, then `up.peer.url` inside tests.
 */
export function useUpstream<T extends { close(): Promise<void> }>(start: () => Promise<T>) {
  const holder = {} as { peer: T };
  beforeAll(async () => {
    holder.peer = await start();
  }, 60_000);
  afterAll(async () => {
    await holder.peer?.close();
  });
  return holder;
}
