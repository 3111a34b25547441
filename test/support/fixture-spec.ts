/**
 * Pieces for tests that serve fixture operations beside the service's own spec (the handler
 * contract, protocol operations): an operation of the fixtures tag with what `make generate`
 * requires of every operation, and the usual JSON content.
 */
export const FIXTURE_TAG = 'Fixtures';

export const json = (schema: object) => ({ content: { 'application/json': { schema } } });
export const anything = { type: 'object', additionalProperties: true };

export const fixtureOperation = (operationId: string, extra: Record<string, unknown>) => ({
  operationId,
  tags: [FIXTURE_TAG],
  summary: operationId,
  description: 'A fixture.',
  security: [],
  'x-permission': null,
  ...extra,
});
