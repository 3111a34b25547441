import type { components } from '../../../generated/openapi';

/**
 * A connector's content: what a version holds and what forks diff, the same for built-in
 * connectors (catalog files, `catalog_versions`) and custom ones (`connectors.content`,
 * `connector_versions`). The OAuth client secret is never part of it: it is sealed apart.
 */
export type Transport = components['schemas']['ConnectorTransport'];

export type StoredAuth =
  | { type: 'none' }
  | { type: 'api_key'; placement: 'header' | 'query'; name: string; value_prefix: string | null }
  | {
      type: 'oauth2';
      authorize_url: string | null;
      token_url: string | null;
      revocation_url: string | null;
      scopes: string[];
      client_id: string | null;
      pkce: boolean;
    };

export interface StoredTool {
  name: string;
  title: string | null;
  description: string;
  input_schema: { type: 'object'; [key: string]: unknown };
}

export interface StoredDocumentation {
  key: string;
  title: string;
  body: string;
  position: number;
  /** RFC 3339 with milliseconds. */
  updated_at: string;
}

export interface ConnectorContent {
  name: string;
  description: string | null;
  icon_url: string | null;
  mcp_url: string;
  transport: Transport;
  auth: StoredAuth;
  tools: StoredTool[];
  documentation: StoredDocumentation[];
}

export type AuthInput = components['schemas']['ConnectorAuthInput'];
export type ToolInput = components['schemas']['ConnectorToolInput'];
export type DocumentationInput = components['schemas']['ConnectorDocumentationEntryInput'];

/** The members of the content, in the order previews list them. */
export const MEMBERS = ['name', 'description', 'icon_url', 'mcp_url', 'transport', 'auth'] as const;
export type Member = (typeof MEMBERS)[number];

/** An auth input with its defaults filled in, without the client secret. */
export function storedAuth(input: AuthInput): StoredAuth {
  switch (input.type) {
    case 'none':
      return { type: 'none' };
    case 'api_key':
      return { type: 'api_key', placement: input.placement ?? 'header', name: input.name ?? 'Authorization', value_prefix: input.value_prefix ?? null };
    case 'oauth2':
      return {
        type: 'oauth2',
        authorize_url: input.authorize_url ?? null,
        token_url: input.token_url ?? null,
        revocation_url: input.revocation_url ?? null,
        scopes: input.scopes ?? [],
        client_id: input.client_id ?? null,
        pkce: input.pkce ?? true,
      };
  }
}

export function storedTool(input: ToolInput): StoredTool {
  return { name: input.name, title: input.title ?? null, description: input.description, input_schema: input.input_schema as StoredTool['input_schema'] };
}

export function storedDocumentation(input: DocumentationInput, at: string): StoredDocumentation {
  return { key: input.key, title: input.title, body: input.body, position: input.position ?? 0, updated_at: at };
}

/** Entries ordered as the contract lists them: by position, then key. */
export function orderedDocumentation(entries: readonly StoredDocumentation[]): StoredDocumentation[] {
  return [...entries].sort((a, b) => a.position - b.position || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** A documentation entry as versions compare it: its timestamp is bookkeeping, not content. */
export const docValue = (entry: StoredDocumentation) => ({ key: entry.key, title: entry.title, body: entry.body, position: entry.position });

/** Deep equality of JSON values (object member order does not matter). */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const other = b as unknown[];
    return a.length === other.length && a.every((item, i) => sameJson(item, other[i]));
  }
  const ka = Object.keys(a as object).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
  const kb = Object.keys(b as object).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
  return ka.length === kb.length && ka.every((k) => sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

/** Whether two contents hold the same thing (documentation timestamps aside). */
export function sameContent(a: ConnectorContent, b: ConnectorContent): boolean {
  return (
    MEMBERS.every((m) => sameJson(a[m], b[m])) &&
    sameJson(a.tools, b.tools) &&
    sameJson(orderedDocumentation(a.documentation).map(docValue), orderedDocumentation(b.documentation).map(docValue))
  );
}

/** The origin (scheme, host, port) of a URL. */
export const originOf = (url: string): string => new URL(url).origin;
