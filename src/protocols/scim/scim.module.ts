import { requireFeature } from '../../access/entitlements';
import type { RenderedError } from '../../http/area';
import { defineModule } from '../../http/area';
import type { RequestContext } from '../../http/context';
import type { ProtocolInput } from '../../http/handler-types';
import { ProtocolRefusal, refuseProblems } from '../../http/protocol';
import { scimTokenAuthenticator } from '../../identity/scim-tokens';
import { resourceTypes, schemas, serviceProviderConfig } from './discovery';
import * as groups from './groups';
import * as users from './users';
import { errorBody, SCIM_MEDIA } from './wire';

const SCIM_OPERATIONS = new Set([
  'listScimV2Users',
  'createScimV2User',
  'getScimV2User',
  'replaceScimV2User',
  'patchScimV2User',
  'deleteScimV2User',
  'listScimV2Groups',
  'createScimV2Group',
  'getScimV2Group',
  'replaceScimV2Group',
  'patchScimV2Group',
  'deleteScimV2Group',
  'getScimV2ServiceProviderConfig',
  'listScimV2ResourceTypes',
  'listScimV2Schemas',
]);

/**
 * The request as validated, or SCIM's refusal of it (a malformed id is a 404), after the
 * plan's `scim` feature is checked: every SCIM answer needs it.
 */
async function admitted<T>(input: ProtocolInput<T>, ctx: RequestContext): Promise<T> {
  await requireFeature(ctx.db, ctx.orgId, 'scim');
  if (!input.valid) refuseProblems('scim', input.problems);
  return input.value;
}

const ok = (status: number, body: unknown, headers?: Record<string, string>) => ({ status, body, contentType: SCIM_MEDIA, headers }) as never;

/**
 * SCIM 2.0 provisioning (RFC 7643, RFC 7644) at /scim/v2: the organization's identity
 * provider, with a SCIM token bound to the organization, keeps its people and groups here.
 * Users are memberships; deprovisioning suspends or removes them as the Members area does.
 */
export default defineModule({
  name: 'SCIM',
  authenticators: { scimToken: scimTokenAuthenticator },
  handlers: {
    async listScimV2Users(input, ctx) {
      const { query } = await admitted(input, ctx);
      return ok(200, await users.list(ctx, query));
    },
    async createScimV2User(input, ctx) {
      const { body } = await admitted(input, ctx);
      const user = await users.create(ctx, body as Record<string, unknown>);
      return ok(201, user, { Location: user.meta.location, ETag: user.meta.version });
    },
    async getScimV2User(input, ctx) {
      const { params, query } = await admitted(input, ctx);
      const { user, version } = await users.get(ctx, params.id, query);
      return ok(200, user, { ETag: version });
    },
    async replaceScimV2User(input, ctx) {
      const { params, headers, body } = await admitted(input, ctx);
      const user = await users.replace(ctx, params.id, headers['If-Match'], body as Record<string, unknown>);
      return ok(200, user, { ETag: user.meta.version });
    },
    async patchScimV2User(input, ctx) {
      const { params, headers, body } = await admitted(input, ctx);
      const user = await users.patch(ctx, params.id, headers['If-Match'], body);
      return ok(200, user, { ETag: user.meta.version });
    },
    async deleteScimV2User(input, ctx) {
      const { params, headers } = await admitted(input, ctx);
      await users.remove(ctx, params.id, headers['If-Match']);
      return { status: 204 } as never;
    },
    async listScimV2Groups(input, ctx) {
      const { query } = await admitted(input, ctx);
      return ok(200, await groups.list(ctx, query));
    },
    async createScimV2Group(input, ctx) {
      const { body } = await admitted(input, ctx);
      const group = await groups.create(ctx, body as Record<string, unknown>);
      return ok(201, group, { Location: group.meta.location, ETag: group.meta.version });
    },
    async getScimV2Group(input, ctx) {
      const { params, query } = await admitted(input, ctx);
      const { group, version } = await groups.get(ctx, params.id, query);
      return ok(200, group, { ETag: version });
    },
    async replaceScimV2Group(input, ctx) {
      const { params, headers, body } = await admitted(input, ctx);
      const group = await groups.replace(ctx, params.id, headers['If-Match'], body as Record<string, unknown>);
      return ok(200, group, { ETag: group.meta.version });
    },
    async patchScimV2Group(input, ctx) {
      const { params, headers, body } = await admitted(input, ctx);
      const group = await groups.patch(ctx, params.id, headers['If-Match'], body);
      return ok(200, group, { ETag: group.meta.version });
    },
    async deleteScimV2Group(input, ctx) {
      const { params, headers } = await admitted(input, ctx);
      await groups.remove(ctx, params.id, headers['If-Match']);
      return { status: 204 } as never;
    },
    async getScimV2ServiceProviderConfig(input, ctx) {
      await admitted(input, ctx);
      return ok(200, serviceProviderConfig(ctx.deps.config.baseUrl));
    },
    async listScimV2ResourceTypes(input, ctx) {
      await admitted(input, ctx);
      return ok(200, resourceTypes(ctx.deps.config.baseUrl));
    },
    async listScimV2Schemas(input, ctx) {
      await admitted(input, ctx);
      return ok(200, schemas(ctx.deps.config.baseUrl));
    },
  },
  renderError(error, operationId): RenderedError | null {
    if (!SCIM_OPERATIONS.has(operationId)) return null;
    if (error instanceof ProtocolRefusal && error.rendered) return error.rendered;
    return { status: error.status, contentType: SCIM_MEDIA, body: errorBody(error) };
  },
});
