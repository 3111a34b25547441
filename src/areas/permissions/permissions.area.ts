import type { components } from '../../../generated/openapi';
import { PERMISSIONS } from '../../identity/permissions';
import { defineArea } from '../../http/area';
import { keyedPageRequest } from '../../http/pagination';
import { loadSpec } from '../../spec';
import { describeOperations } from '../../spec/operations';

type PermissionInfo = components['schemas']['PermissionInfo'];

let catalog: PermissionInfo[] | null = null;

/**
 * The catalog as the spec assembles it (schemas/permissions.yml and every area's
 * x-permissions), in its order. A permission is person-only when every operation that needs
 * it is reserved for a person: an API token carrying it gains nothing.
 */
function permissionCatalog(): PermissionInfo[] {
  if (catalog) return catalog;
  const spec = loadSpec();
  const schema = spec.components.schemas.Permission as { 'x-enumDescriptions'?: Record<string, string> };
  const descriptions = schema['x-enumDescriptions'] ?? {};
  const operations = Object.values(describeOperations(spec).operations);
  catalog = PERMISSIONS.map((name) => {
    const needing = operations.filter((op) => op.permission === name);
    const [resource = name, action = ''] = name.split(':');
    return {
      name,
      resource,
      action,
      description: descriptions[name] ?? name,
      person_only: needing.length > 0 && needing.every((op) => op.personOnly),
    };
  });
  return catalog;
}

export default defineArea({
  tag: 'Permissions',
  handlers: {
    async listPermissions({ query }) {
      const all = permissionCatalog();
      const page = keyedPageRequest(query, (name) => all.some((p) => p.name === name));
      const matching = query.resource === undefined ? all : all.filter((p) => p.resource === query.resource);
      const start = page.after === undefined ? 0 : all.findIndex((p) => p.name === page.after) + 1;
      const rest = matching.filter((p) => all.indexOf(p) >= start);
      const data = rest.slice(0, page.limit);
      const last = data[data.length - 1];
      return {
        status: 200,
        body: { data, next_cursor: rest.length > page.limit && last ? Buffer.from(last.name, 'utf8').toString('base64url') : null },
      };
    },
  },
});
