import { defineArea } from '../../http/area';
import { startCatalog } from './catalog';
import { clientSecretContext } from './resolve';

export default defineArea({
  tag: 'Connectors',
  handlers: {},
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
