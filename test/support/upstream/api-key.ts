/** An MCP upstream that accepts only configured API keys, placed in a header or the query. */
import { sendJson, type Transport, type UpstreamTool } from './mcp';
import { startUpstreamServer, type UpstreamPeer } from './server';

/** Where the key goes; the same fields as a connector's api_key auth. */
export interface KeyPlacement {
  placement: 'header' | 'query';
  /** Header or query parameter name. */
  name: string;
  /** Header only: what precedes the key, e.g. "Bearer " (compared case-insensitively). */
  value_prefix?: string | null;
}

export interface ApiKeyUpstreamOptions {
  /** key → member label reported by `whoami`. */
  keys: Record<string, string>;
  /** Default: header Authorization with prefix "Bearer ". */
  placement?: KeyPlacement;
  /** Which endpoint `.url` names (both are served): POST /mcp, or GET /sse + POST /messages. */
  transport?: Transport;
  /** Extra tools besides whoami and echo (see `manyTools`). */
  tools?: UpstreamTool[];
  /** `tools/list` page size; default one page. */
  pageSize?: number;
  /** Streamable HTTP answers as JSON instead of an SSE stream. */
  jsonResponse?: boolean;
  delayMs?: number;
  /** The server's keep-alive timeout (Node's default 5 s). */
  keepAliveTimeoutMs?: number;
}

export interface ApiKeyUpstream extends UpstreamPeer {
  placement: KeyPlacement;
  /** Replaces the accepted keys (rotation, revocation). */
  setKeys(keys: Record<string, string>): void;
}

export const BEARER_HEADER: KeyPlacement = { placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' };

/** The key a request carries as `placement` places it (prefix removed); null when absent or the prefix is wrong. */
function extractKey(placement: KeyPlacement, headers: NodeJS.Dict<string | string[]>, url: URL): { key: string | null; raw: string | null } {
  if (placement.placement === 'query') {
    const key = url.searchParams.get(placement.name);
    return { key, raw: key };
  }
  const value = headers[placement.name.toLowerCase()];
  const raw = Array.isArray(value) ? (value[0] ?? null) : (value ?? null);
  if (raw === null) return { key: null, raw };
  const prefix = placement.value_prefix ?? '';
  if (!raw.toLowerCase().startsWith(prefix.toLowerCase())) return { key: null, raw };
  return { key: raw.slice(prefix.length), raw };
}

/** A real MCP server on loopback that accepts only the given keys; anything else gets 401. */
export async function startApiKeyUpstream(options: ApiKeyUpstreamOptions): Promise<ApiKeyUpstream> {
  let keys = new Map(Object.entries(options.keys));
  const placement = options.placement ?? BEARER_HEADER;
  const peer = (await startUpstreamServer({
    name: 'api-key-upstream',
    transport: options.transport,
    tools: options.tools,
    pageSize: options.pageSize,
    jsonResponse: options.jsonResponse,
    delayMs: options.delayMs,
    keepAliveTimeoutMs: options.keepAliveTimeoutMs,
    authenticate(req, url) {
      const { key, raw } = extractKey(placement, req.headers, url);
      const member = key === null ? undefined : keys.get(key);
      if (key !== null && member !== undefined) return { caller: { member, credential: key } };
      return {
        credential: key ?? raw,
        refuse: (res) => sendJson(res, 401, { error: key === null ? 'missing API key' : 'invalid API key' }),
      };
    },
  })) as ApiKeyUpstream;
  peer.placement = placement;
  peer.setKeys = (next) => {
    keys = new Map(Object.entries(next));
  };
  return peer;
}
