import { MODULES } from '../generated/modules';
import { buildRegistry, type Registry } from './http/registry';
import { loadSpec } from './spec';
import { describeOperations } from './spec/operations';

export { MODULES };

/** The service's own modules against its own spec: what is built, what answers 501. */
export function serviceRegistry(): Registry {
  const spec = loadSpec();
  return buildRegistry(MODULES, describeOperations(spec).operations, Object.keys(spec.components.securitySchemes ?? {}));
}
