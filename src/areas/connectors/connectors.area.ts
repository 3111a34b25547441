import { defineArea } from '../../http/area';
import { startCatalog } from './catalog';
import * as connectors from './connectors.service';
import { clientSecretContext } from './resolve';

export default defineArea({
  tag: 'Connectors',
  handlers: {
    async listConnectors({ query }, ctx) {
      return { status: 200, body: await connectors.list(ctx, query) };
    },
    async getConnector({ params }, ctx) {
      return { status: 200, body: await connectors.get(ctx, params.slug) };
    },
  },
  // The built-in catalog is loaded, checked and recorded before the first request.
  async start(deps) {
    await startCatalog(deps.db, deps.config.catalogDir);
  },
  sealed: [
    {
      table: 'connectors',
      column: 'client_secret_enc',
      key: ['org_id', 'slug'],
      context: (id) => {
        const at = id.indexOf(':');
        return clientSecretContext(id.slice(0, at), id.slice(at + 1));
      },
    },
  ],
});
