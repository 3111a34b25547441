import type { OpenApiDocument } from './index';

/**
 * What the router, the guard and the type generator read about one operation. Derived from
 * the document by `describeOperations`: at build time into generated/operations.ts (for the
 * types), and at start-up from whatever document the app serves (fixture specs included).
 */
export interface OperationMeta {
  method: string;
  path: string;
  tag: string;
  /** Security scheme names, in the order the spec lists them. */
  security: readonly string[];
  /** A `{}` alternative: the operation also serves callers without a credential. */
  credentialOptional: boolean;
  /** Takes `X-Organization-Id`: the caller acts in the organization it names. */
  orgScoped: boolean;
  permission: string | null;
  audit: string | null;
  personOnly: boolean;
  /** The events a successful call may emit (`x-events`). */
  events: readonly string[];
  /** Served by an engine mounted beside the router (`x-engine`), not by a handler. */
  engine: string | null;
  /** Header parameters, as the spec spells them. */
  headers: readonly string[];
  /** Request body media types; empty when the operation takes no body. */
  bodyMedia: readonly string[];
  bodyRequired: boolean;
  /** Multipart parts that carry bytes (`format: binary`): they arrive as files, not strings. */
  fileParts: readonly string[];
  /** A cap on the body below the server-wide one (`x-max-body-bytes`): an organization logo, say. */
  maxBodyBytes: number | null;
  /**
   * The wire format the operation owns (`x-protocol`): unknown parameters and body members are
   * ignored and validation problems reach its handler, which answers in that protocol.
   */
  protocol: Protocol | null;
  /** Browsers of other origins may call it (`x-cors` on its path): preflights are answered, headers exposed. */
  cors: boolean;
  /** Only this service's own pages may send it from a browser (`x-first-party`), whatever the credential. */
  firstParty: boolean;
}

/** The foreign wire formats an operation may own (`x-protocol`). */
export const PROTOCOLS = ['oauth', 'scim', 'jsonrpc', 'oidc', 'saml'] as const;
export type Protocol = (typeof PROTOCOLS)[number];

export const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
const WRITE_METHODS = new Set(['post', 'put', 'patch', 'delete']);
const ORG_HEADER_REF = '#/components/parameters/OrganizationHeader';

type Json = Record<string, any>;

function resolve(doc: OpenApiDocument, node: Json | undefined): Json | undefined {
  let current = node;
  for (let hops = 0; current && typeof current.$ref === 'string' && hops < 20; hops += 1) {
    const ref: string = current.$ref;
    if (!ref.startsWith('#/')) return current;
    current = ref.slice(2).split('/').reduce<any>((n, key) => n?.[key.replace(/~1/g, '/').replace(/~0/g, '~')], doc);
  }
  return current;
}

/**
 * Reads every operation and checks the rules the spec must keep for the server to be safe
 * (every org-scoped operation declares a permission, every write an audit action, …).
 * `problems` is empty for a sound document.
 */
export function describeOperations(doc: OpenApiDocument): { operations: Record<string, OperationMeta>; problems: string[] } {
  const problems: string[] = [];
  const tags = new Set<string>(((doc.tags ?? []) as Json[]).map((t) => t.name));
  const schemas = doc.components?.schemas ?? {};
  const permissions = new Set<string>(schemas.Permission?.enum ?? []);
  const events = new Set<string>(schemas.EventType?.enum ?? []);
  const operations: Record<string, OperationMeta> = {};

  for (const [path, item] of Object.entries<Json>(doc.paths ?? {})) {
    const cors = item['x-cors'] ?? false;
    if (typeof cors !== 'boolean') problems.push(`${path}: x-cors must be true or false`);
    for (const method of METHODS) {
      const op = item[method] as Json | undefined;
      if (!op) continue;
      const where = `${method.toUpperCase()} ${path}`;
      const id: string | undefined = op.operationId;
      if (!id || !/^[a-z][A-Za-z0-9]+$/.test(id)) problems.push(`${where}: operationId must be camelCase`);
      if (id && operations[id]) problems.push(`${where}: operationId ${id} is used twice`);
      if (!Array.isArray(op.tags) || op.tags.length !== 1 || !tags.has(op.tags[0])) {
        problems.push(`${where}: needs exactly one tag from the declared tags`);
      }
      const rawParams: Json[] = [...(item.parameters ?? []), ...(op.parameters ?? [])];
      const orgScoped = rawParams.some((p) => p.$ref === ORG_HEADER_REF);
      const params = rawParams.map((p) => resolve(doc, p) ?? {});
      if (!('x-permission' in op)) problems.push(`${where}: declares no x-permission (use null for none)`);
      const permission: string | null = op['x-permission'] ?? null;
      if (permission !== null && !permissions.has(permission)) problems.push(`${where}: x-permission ${permission} is not in the Permission enum`);
      const isWrite = WRITE_METHODS.has(method);
      if (isWrite && !('x-audit' in op)) problems.push(`${where}: a write must declare x-audit`);
      const audit: string | null = op['x-audit'] ?? null;
      if (audit !== null && !/^[a-z_]+\.[a-z_]+$/.test(audit)) problems.push(`${where}: x-audit must be resource.action`);
      const requirements: Json[] = op.security ?? (doc.security as Json[] | undefined) ?? [];
      const security = requirements.flatMap((req) => Object.keys(req));
      const credentialOptional = security.length > 0 && requirements.some((req) => Object.keys(req).length === 0);
      const personOnly = op['x-person-only'] === true;
      if (personOnly && (security.includes('apiToken') || !security.includes('session'))) {
        problems.push(`${where}: x-person-only operations accept a session and no API token`);
      }
      if (orgScoped && (security.length === 0 || credentialOptional)) problems.push(`${where}: org-scoped but needs no credential`);
      if (!orgScoped && permission !== null) problems.push(`${where}: x-permission needs an organization; add the X-Organization-Id parameter`);
      const declaredEvents: string[] = op['x-events'] ?? [];
      if (!Array.isArray(declaredEvents)) problems.push(`${where}: x-events must be a list of event types`);
      for (const event of declaredEvents) if (!events.has(event)) problems.push(`${where}: x-events names ${event}, which is not in the event catalog`);
      const engine: string | null = op['x-engine'] ?? null;
      const maxBodyBytes: number | null = op['x-max-body-bytes'] ?? null;
      if (maxBodyBytes !== null && (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 1)) problems.push(`${where}: x-max-body-bytes must be a positive whole number`);
      if (engine !== null && !/^[a-z][a-z0-9-]*$/.test(engine)) problems.push(`${where}: x-engine must name an engine in lowercase`);
      const firstParty = op['x-first-party'] ?? false;
      if (typeof firstParty !== 'boolean') problems.push(`${where}: x-first-party must be true or false`);
      const protocol: Protocol | null = op['x-protocol'] ?? null;
      if (protocol !== null && !(PROTOCOLS as readonly string[]).includes(protocol)) problems.push(`${where}: x-protocol must be one of ${PROTOCOLS.join(', ')}`);

      const requestBody = resolve(doc, op.requestBody);
      const content: Json = requestBody?.content ?? {};
      const multipart = resolve(doc, content['multipart/form-data']?.schema);
      const fileParts = Object.entries<Json>(multipart?.properties ?? {})
        .filter(([, schema]) => (resolve(doc, schema) ?? schema).format === 'binary')
        .map(([name]) => name);

      if (id) {
        operations[id] = {
          method, path, tag: op.tags?.[0] ?? '', security, credentialOptional, orgScoped, permission, audit, personOnly,
          events: declaredEvents, engine,
          headers: params.filter((p) => p.in === 'header').map((p) => p.name as string),
          bodyMedia: Object.keys(content),
          bodyRequired: requestBody?.required === true,
          fileParts,
          maxBodyBytes,
          protocol,
          cors: cors === true,
          firstParty: firstParty === true,
        };
      }
    }
  }
  return { operations, problems };
}
