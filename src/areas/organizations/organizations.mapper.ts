import type { components } from '../../../generated/openapi';

type Organization = components['schemas']['Organization'];

export interface OrganizationColumns {
  id: string;
  name: string;
  slug: string;
  logo_url: string | null;
  require_mfa: boolean;
  plan: string;
  created_at: Date;
  updated_at: Date;
}

export function toOrganization(row: OrganizationColumns): Organization {
  return {
    id: row.id,
    name: row.name,
    slug: row.slug,
    logo_url: row.logo_url,
    require_mfa: row.require_mfa,
    plan: row.plan,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}
