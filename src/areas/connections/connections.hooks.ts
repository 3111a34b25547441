import type { Executor } from '../../db/database';
import type { WriteScope } from '../../http/context';
import type { HookListeners } from '../../http/hooks';
import { seesConnector } from '../connectors';
import * as repo from './connections.repo';
import { eventConnection } from '../../mcp/upstream/credentials';

/**
 * What connections do when a custom connector changes, inside the connector's transaction:
 * disconnected when it sends credentials elsewhere, or when their owner no longer sees it;
 * counted, so that a connector in use is not deleted.
 */

type Reason = 'connector_changed' | 'connector_access_lost' | 'owner_left';

const WHY: Record<Reason, string> = {
  connector_changed: 'The connector changed where credentials are sent; reconnect to send them there.',
  connector_access_lost: 'The owner can no longer see the connector.',
  owner_left: 'The owner is no longer a member of the organization; someone with connection:manage may transfer or delete it.',
};

/** Discards the credentials of a connection and stops using it, emitting `connection.disconnected`. */
export async function disconnect(w: WriteScope, row: repo.ConnectionRow, reason: Reason): Promise<void> {
  const updated = await repo.updateConnection(w.db, row.org_id, row.id, {
    status: 'disconnected',
    status_reason: reason,
    status_changed_at: new Date(),
    credentials_enc: null,
    // Discovered endpoints and a registered client belong to where the connector pointed.
    oauth_client_enc: reason === 'connector_changed' ? null : row.oauth_client_enc,
    authorize_state_hash: null,
    authorize_enc: null,
    authorize_expires_at: null,
    last_error: WHY[reason],
  });
  await repo.forgetTools(w.db, row.id);
  if (updated && row.status !== 'disconnected') w.emit('connection.disconnected', { connection: eventConnection(updated), reason: WHY[reason] });
}

async function onConnectorChanged(w: WriteScope, orgId: string, slug: string): Promise<void> {
  for (const row of await repo.connectionsOfConnector(w.db, orgId, slug, true)) await disconnect(w, row, 'connector_changed');
}

async function onConnectorAccessChanged(w: WriteScope, orgId: string, slug: string): Promise<void> {
  for (const row of await repo.connectionsOfConnector(w.db, orgId, slug, true)) {
    if (row.status !== 'disconnected' && !(await seesConnector(w.db, orgId, row.owner_user_id, slug))) await disconnect(w, row, 'connector_access_lost');
  }
}

/** The owner's membership ended (removeMember): every connection of theirs stops, credentials discarded. */
async function onMemberRemoved(w: WriteScope, orgId: string, userId: string): Promise<void> {
  for (const row of await repo.connectionsOfOwner(w.db, orgId, userId, true)) {
    if (row.status !== 'disconnected') await disconnect(w, row, 'owner_left');
  }
}

async function usages(db: Executor, orgId: string, slug: string) {
  const rows = await repo.connectionsOfConnector(db, orgId, slug);
  return { count: rows.length, what: rows.length === 1 ? 'connection' : 'connections' };
}

/** What connections listen to: connector changes and usage, and members leaving. */
export const connectionHooks: HookListeners = {
  connectorChanged: onConnectorChanged,
  connectorAccessChanged: onConnectorAccessChanged,
  connectorUsage: usages,
  memberRemoved: onMemberRemoved,
};
