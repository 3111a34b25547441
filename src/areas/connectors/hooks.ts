import type { Executor } from '../../db/database';
import type { WriteScope } from '../../http/context';

/**
 * Where other areas plug into what happens to custom connectors, inside the connector's own
 * transaction. The connections area registers its hooks here when it loads (templates
 * later): `connectorChangeHooks.push(async (w, orgId, slug) => …)`.
 */

/**
 * The upstream a connector names changed identity: the origin (scheme, host, port) of
 * `mcp_url`, `auth.type`, or the OAuth `client_id`, `token_url` or `revocation_url`
 * (updateConnector, applyConnectorPull). Every connection to the connector must be
 * disconnected: credentials discarded, status `disconnected` with status_reason
 * `connector_changed`, emitting `connection.disconnected` (both operations declare it).
 */
export type ConnectorChangeHook = (w: WriteScope, orgId: string, slug: string) => Promise<void>;
export const connectorChangeHooks: ConnectorChangeHook[] = [];

/**
 * A share of the connector was revoked (revokeConnectorShare): members who no longer see it
 * (`seesCustomConnector` in resolve.ts tells) lose their connections to it, disconnected as
 * above with status_reason `access_revoked`, emitting `connection.disconnected`.
 */
export type ConnectorAccessHook = (w: WriteScope, orgId: string, slug: string) => Promise<void>;
export const connectorAccessHooks: ConnectorAccessHook[] = [];

/**
 * What still uses a connector and forbids deleting it (connections, template entries): each
 * hook counts its own; deleteConnector answers 409 `connector_in_use` when any is above zero.
 * Runs inside the delete's transaction, after the connector row is locked.
 */
export type ConnectorUsageHook = (db: Executor, orgId: string, slug: string) => Promise<{ count: number; what: string }>;
export const connectorUsageHooks: ConnectorUsageHook[] = [];

export async function runChangeHooks(w: WriteScope, orgId: string, slug: string): Promise<void> {
  for (const hook of connectorChangeHooks) await hook(w, orgId, slug);
}

export async function runAccessHooks(w: WriteScope, orgId: string, slug: string): Promise<void> {
  for (const hook of connectorAccessHooks) await hook(w, orgId, slug);
}

/** What still uses the connector, in words ("2 connections"); empty when nothing does. */
export async function usagesOf(db: Executor, orgId: string, slug: string): Promise<string[]> {
  const found: string[] = [];
  for (const hook of connectorUsageHooks) {
    const { count, what } = await hook(db, orgId, slug);
    if (count > 0) found.push(`${count} ${what}`);
  }
  return found;
}
