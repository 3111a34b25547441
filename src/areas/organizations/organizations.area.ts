import { defineArea } from '../../http/area';
import { Representation } from '../../http/representation';
import { pageRequest } from '../../http/pagination';
import * as apiTokens from './api-tokens.service';
import * as billing from './organizations.billing';
import * as logo from './organizations.logo';
import * as organizations from './organizations.service';

export default defineArea({
  tag: 'Organizations',
  handlers: {
    async listOrganizations({ query }, ctx) {
      return { status: 200, body: await organizations.listOrganizations(ctx, pageRequest(query, 'organization')) };
    },
    async createOrganization({ body }, ctx) {
      const created = await organizations.createOrganization(ctx, body);
      return { status: 201, body: created, headers: { Location: `/organization/${created.id}` } };
    },
    async getOrganization({ params }, ctx) {
      return { status: 200, body: await organizations.getOrganization(ctx, params.id) };
    },
    async updateOrganization({ params, body }, ctx) {
      return { status: 200, body: await organizations.updateOrganization(ctx, params.id, body) };
    },
    async deleteOrganization({ params, query }, ctx) {
      await organizations.deleteOrganization(ctx, params.id, query.confirm);
      return { status: 204 };
    },

    async getOrganizationLogo({ params }, ctx) {
      const image = await logo.readLogo(ctx, params.id);
      return {
        status: 200,
        representation: new Representation(image.bytes, image.contentType, image.sha256),
        headers: {
          'Cache-Control': 'private, max-age=86400',
          'X-Content-Type-Options': 'nosniff',
          'Content-Security-Policy': "default-src 'none'; sandbox",
        },
      };
    },
    async uploadOrganizationLogo({ params, body }, ctx) {
      organizations.checkSameOrganization(ctx, params.id);
      return { status: 200, body: await logo.uploadLogo(ctx, params.id, body) };
    },
    async deleteOrganizationLogo({ params }, ctx) {
      organizations.checkSameOrganization(ctx, params.id);
      await logo.deleteLogo(ctx, params.id);
      return { status: 204 };
    },

    async getOrganizationBilling({ params }, ctx) {
      organizations.checkSameOrganization(ctx, params.id);
      return { status: 200, body: await billing.getBilling(ctx, params.id) };
    },
    async createBillingCheckoutSession({ params, body }, ctx) {
      organizations.checkSameOrganization(ctx, params.id);
      return { status: 200, body: await billing.startCheckout(ctx, params.id, body) };
    },
    async createBillingPortalSession({ params, body }, ctx) {
      organizations.checkSameOrganization(ctx, params.id);
      return { status: 200, body: await billing.openPortal(ctx, params.id, body) };
    },

    async listApiTokens({ query }, ctx) {
      const page = pageRequest(query, 'apiToken');
      return { status: 200, body: await apiTokens.list(ctx, page, { user_id: query.user_id, all: query.all, status: query.status }) };
    },
    async createApiToken({ body }, ctx) {
      const created = await apiTokens.create(ctx, body);
      return { status: 201, body: created, headers: { Location: `/api-token/${created.api_token.id}` } };
    },
    async revokeApiToken({ params }, ctx) {
      await apiTokens.revoke(ctx, params.id);
      return { status: 204 };
    },
  },
});
