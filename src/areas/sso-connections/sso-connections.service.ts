import type { components } from '../../../generated/openapi';
import type { Executor } from '../../db/database';
import { requireFeature } from '../../access/entitlements';
import type { RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError } from '../../http/errors';
import type { Usage } from '../../http/hooks';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import { OutboundRefused, OutboundSession, refuseUrl } from '../../outbound/client';
import { describeCertificate, METADATA_MAX_BYTES, parseIdpMetadata, SamlMetadataInvalid, type IdpSettings } from '../../protocols/saml/metadata';
import { revokeGrantsOutside } from '../../protocols/oauth-server/grants';
import { describe, discoverRelyingParty, SocialLoginFailure, tokenAuthMethodOf } from '../../protocols/social-login/oidc';
import { checkGrantable, resolveRoles } from '../invites';
import * as repo from './sso-connections.repo';

type SsoConnection = components['schemas']['SsoConnection'];
type Create = components['schemas']['SsoConnectionCreate'];
type Update = components['schemas']['SsoConnectionUpdate'];
type SamlInput = components['schemas']['SsoSamlSettingsInput'];
type OidcInput = components['schemas']['SsoOidcSettingsInput'];

const WHAT = 'SSO connection';
const NAME_CONSTRAINT = 'sso_connections_org_id_name_key';
const DOMAIN_CONSTRAINT = 'sso_connection_domains_domain_key';
const DEFAULT_SCOPES = ['openid', 'email', 'profile'];
/** IdP metadata is refetched once a day to follow certificate rollovers. */
export const METADATA_REFRESH_MS = 24 * 3600_000;

/** The context the OIDC client secret is sealed with: a sealed value moved to another row does not open. */
export const clientSecretContext = (id: string) => `sso_connections.oidc_client_secret:${id}`;

export const samlUrls = (baseUrl: string, id: string) => ({
  sp_entity_id: `${baseUrl}/auth/saml/${id}/metadata`,
  acs_url: `${baseUrl}/auth/saml/${id}/acs`,
  sp_metadata_url: `${baseUrl}/auth/saml/${id}/metadata`,
  login_url: `${baseUrl}/auth/saml/${id}/login`,
});

export const oidcUrls = (baseUrl: string, id: string) => ({
  redirect_uri: `${baseUrl}/auth/oidc/${id}/callback`,
  login_url: `${baseUrl}/auth/oidc/${id}/login`,
});

export function toSsoConnection(row: repo.ConnectionRow, domains: string[], baseUrl: string): SsoConnection {
  const [current] = row.saml_idp_certificates ?? [];
  const cert = current ? describeCertificate(current) : null;
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    status: row.status,
    domains,
    enforce: row.enforce,
    jit_provisioning: { enabled: row.jit_enabled, default_role_id: row.jit_default_role_id },
    saml:
      row.type === 'saml'
        ? {
            idp_entity_id: row.saml_idp_entity_id,
            idp_sso_url: row.saml_idp_sso_url,
            idp_certificate: cert?.pem ?? null,
            idp_certificate_fingerprint_sha256: cert?.fingerprint ?? null,
            idp_certificate_not_after: cert?.notAfter.toISOString() ?? null,
            idp_metadata_url: row.saml_idp_metadata_url,
            ...samlUrls(baseUrl, row.id),
          }
        : null,
    oidc:
      row.type === 'oidc'
        ? {
            issuer: row.oidc_issuer,
            client_id: row.oidc_client_id,
            has_client_secret: row.oidc_client_secret_enc !== null,
            scopes: row.oidc_scopes ?? DEFAULT_SCOPES,
            authorization_endpoint: row.oidc_authorization_endpoint,
            token_endpoint: row.oidc_token_endpoint,
            jwks_uri: row.oidc_jwks_uri,
            ...oidcUrls(baseUrl, row.id),
          }
        : null,
    last_sign_in_at: row.last_sign_in_at?.toISOString() ?? null,
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Whether a connection has what it needs to sign anyone in. */
export function isComplete(
  row: Pick<
    repo.ConnectionRow,
    'type' | 'saml_idp_entity_id' | 'saml_idp_sso_url' | 'saml_idp_certificates' | 'oidc_issuer' | 'oidc_client_id' | 'oidc_client_secret_enc'
  >,
): boolean {
  return row.type === 'saml'
    ? !!row.saml_idp_entity_id && !!row.saml_idp_sso_url && (row.saml_idp_certificates?.length ?? 0) > 0
    : !!row.oidc_issuer && !!row.oidc_client_id && !!row.oidc_client_secret_enc;
}

async function render(ctx: RequestContext, rows: repo.ConnectionRow[]): Promise<SsoConnection[]> {
  const domains = await repo.domainsOf(
    ctx.db,
    rows.map((r) => r.id),
  );
  return rows.map((row) => toSsoConnection(row, domains.get(row.id) ?? [], ctx.deps.config.baseUrl));
}

export async function list(ctx: RequestContext, page: PageRequest, filter: repo.ListFilter): Promise<Page<SsoConnection>> {
  const rows = await repo.listConnections(ctx.db, ctx.orgId, page, filter);
  const shown = await render(ctx, rows);
  const byId = new Map(shown.map((c) => [c.id, c]));
  return toPage(rows, page, (row) => byId.get(row.id) as SsoConnection);
}

export async function get(ctx: RequestContext, id: string): Promise<SsoConnection> {
  const row = await repo.findConnection(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return (await render(ctx, [row]))[0] as SsoConnection;
}

/** The role new members get must be this organization's, not Owner, and grant only what the caller holds. */
async function checkDefaultRole(ctx: RequestContext, roleId: string | null | undefined): Promise<void> {
  if (!roleId) return;
  const [role] = await resolveRoles(ctx.db, ctx.orgId, [roleId], () => '/jit_provisioning/default_role_id');
  if (role?.system_key === 'owner') {
    throw validationError([
      { in: 'body', pointer: '/jit_provisioning/default_role_id', message: 'cannot be the Owner role; people provisioned at sign-in get a lesser role' },
    ]);
  }
  await checkGrantable(ctx, role ? [role] : []);
}

/** 409 unless every domain is verified by this organization and served by no other connection. */
async function checkDomains(ctx: RequestContext, domains: readonly string[], exceptId: string | null): Promise<void> {
  const missing = await repo.unverified(ctx.db, ctx.orgId, domains);
  if (missing.length > 0) {
    throw new ApiError(
      'domain_not_verified',
      `${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not a verified domain of this organization; verify it first (/org-domain).`,
    );
  }
  const taken = await repo.servedElsewhere(ctx.db, domains, exceptId);
  if (taken.length > 0) throw domainTaken(taken);
}

const domainTaken = (domains: readonly string[]) =>
  new ApiError(
    'conflict',
    `${domains.join(', ')} ${domains.length === 1 ? 'is' : 'are'} already served by another SSO connection; a domain signs in through one.`,
  );

const outbound = (ctx: RequestContext) => ctx.deps.config.outbound;

function metadataInvalid(message: string, pointer: string) {
  return new ApiError('idp_metadata_invalid', message, { errors: [{ in: 'body', pointer, message }] });
}

function refuseOutbound(ctx: RequestContext, url: string, pointer: string): void {
  const refusal = refuseUrl(url, outbound(ctx));
  if (refusal) {
    throw new ApiError('outbound_url_not_allowed', `The URL ${refusal}.`, { errors: [{ in: 'body', pointer, message: refusal }] });
  }
}

/** Fetches IdP metadata through the outbound guard: one request, capped, no redirect followed. */
export async function fetchMetadata(policy: RequestContext['deps']['config']['outbound'], url: string): Promise<string> {
  const session = new OutboundSession({ policy, timeoutMs: policy.timeoutMs, maxBytes: METADATA_MAX_BYTES });
  try {
    const response = await session.fetch(url, { headers: { accept: 'application/samlmetadata+xml, application/xml, text/xml' } });
    if (response.status !== 200) throw new SamlMetadataInvalid(`The metadata URL answered ${response.status}.`);
    return await response.text();
  } catch (err) {
    if (err instanceof SamlMetadataInvalid) throw err;
    if (err instanceof OutboundRefused) throw new SamlMetadataInvalid(`The metadata could not be fetched: ${err.message}`);
    throw new SamlMetadataInvalid('The metadata could not be fetched.');
  } finally {
    session.close();
  }
}

type SamlColumns = Pick<
  repo.ConnectionRow,
  'saml_idp_entity_id' | 'saml_idp_sso_url' | 'saml_idp_certificates' | 'saml_idp_metadata_url' | 'saml_metadata_refreshed_at'
>;

/** The SAML columns the input sets: one of three ways, never mixed. */
async function samlSettings(ctx: RequestContext, input: SamlInput, current: SamlColumns | null): Promise<Partial<SamlColumns>> {
  const byHand = ['idp_entity_id', 'idp_sso_url', 'idp_certificate'].filter((k) => k in input);
  const ways = [input.metadata_url !== undefined, input.metadata_xml !== undefined, byHand.length > 0].filter(Boolean).length;
  if (ways > 1) {
    throw validationError([{ in: 'body', pointer: '/saml', message: 'give metadata_url, metadata_xml, or the idp_* members by hand: one way, not several' }]);
  }
  const imported = (settings: IdpSettings, url: string | null): Partial<SamlColumns> => {
    if (!/^https?:\/\//.test(settings.ssoUrl)) throw metadataInvalid('The SingleSignOnService location is not an http(s) URL.', '/saml');
    return {
      saml_idp_entity_id: settings.entityId.slice(0, 1024),
      saml_idp_sso_url: settings.ssoUrl,
      saml_idp_certificates: settings.certificates,
      saml_idp_metadata_url: url,
      saml_metadata_refreshed_at: url ? new Date() : null,
    };
  };
  try {
    if (input.metadata_url !== undefined) {
      refuseOutbound(ctx, input.metadata_url, '/saml/metadata_url');
      return imported(parseIdpMetadata(await fetchMetadata(outbound(ctx), input.metadata_url)), input.metadata_url);
    }
    if (input.metadata_xml !== undefined) return imported(parseIdpMetadata(input.metadata_xml), null);
    const changes: Partial<SamlColumns> = { saml_idp_metadata_url: null, saml_metadata_refreshed_at: null };
    if (input.idp_entity_id !== undefined) changes.saml_idp_entity_id = input.idp_entity_id;
    if (input.idp_sso_url !== undefined) {
      if (!/^https?:\/\//.test(input.idp_sso_url)) throw validationError([{ in: 'body', pointer: '/saml/idp_sso_url', message: 'must be an https URL' }]);
      changes.saml_idp_sso_url = input.idp_sso_url;
    }
    if (input.idp_certificate !== undefined) {
      // A certificate entered by hand replaces the list; the previous one stays accepted during
      // the switch only when the metadata published both.
      changes.saml_idp_certificates = [describeCertificate(input.idp_certificate).pem];
    }
    void current;
    return changes;
  } catch (err) {
    if (err instanceof SamlMetadataInvalid)
      throw metadataInvalid(
        err.message,
        input.metadata_url !== undefined ? '/saml/metadata_url' : input.metadata_xml !== undefined ? '/saml/metadata_xml' : '/saml/idp_certificate',
      );
    throw err;
  }
}

type OidcColumns = Pick<
  repo.ConnectionRow,
  | 'oidc_issuer'
  | 'oidc_client_id'
  | 'oidc_client_secret_enc'
  | 'oidc_scopes'
  | 'oidc_authorization_endpoint'
  | 'oidc_token_endpoint'
  | 'oidc_jwks_uri'
  | 'oidc_token_auth_method'
>;

/**
 * Microsoft Entra's multi-tenant endpoints (`common`, `organizations`, `consumers`) publish an
 * issuer template rather than an issuer: any tenant's tokens would match. One tenant's issuer
 * is required.
 */
const ENTRA_MULTI_TENANT = /^https:\/\/login\.microsoftonline\.com\/(common|organizations|consumers|\{tenantid\})(\/|$)/i;

/** The OIDC columns the input sets; a new issuer is discovered now. */
async function oidcSettings(ctx: RequestContext, id: string, input: OidcInput): Promise<Partial<OidcColumns>> {
  const changes: Partial<OidcColumns> = {};
  if (input.issuer !== undefined) {
    const issuer = input.issuer;
    if (ENTRA_MULTI_TENANT.test(issuer)) {
      throw metadataInvalid(
        "A Microsoft Entra multi-tenant issuer (common, organizations, consumers) names no tenant, so any tenant could sign people in; use your tenant's issuer, https://login.microsoftonline.com/{tenant id}/v2.0.",
        '/oidc/issuer',
      );
    }
    refuseOutbound(ctx, issuer, '/oidc/issuer');
    let metadata;
    try {
      const rp = await discoverRelyingParty(
        { key: id, kind: 'oidc', name: id, issuer, apiUrl: null, clientId: input.client_id ?? 'discovery', clientSecret: null, scope: 'openid' },
        outbound(ctx),
      );
      metadata = rp.config.serverMetadata();
    } catch (err) {
      const detail = err instanceof SocialLoginFailure ? err.detail : describe(err);
      ctx.log.info({ issuer, problem: detail }, 'SSO connection OIDC discovery failed');
      throw metadataInvalid(`The discovery document of ${issuer} could not be fetched or does not name this issuer.`, '/oidc/issuer');
    }
    if (!metadata.authorization_endpoint || !metadata.token_endpoint || !metadata.jwks_uri) {
      throw metadataInvalid('The discovery document lacks an authorization endpoint, token endpoint or jwks_uri.', '/oidc/issuer');
    }
    changes.oidc_issuer = issuer;
    changes.oidc_authorization_endpoint = metadata.authorization_endpoint;
    changes.oidc_token_endpoint = metadata.token_endpoint;
    changes.oidc_jwks_uri = metadata.jwks_uri;
    changes.oidc_token_auth_method = tokenAuthMethodOf(metadata);
  }
  if (input.client_id !== undefined) changes.oidc_client_id = input.client_id;
  if (input.client_secret !== undefined) changes.oidc_client_secret_enc = ctx.deps.secrets.seal(input.client_secret, clientSecretContext(id));
  if (input.scopes !== undefined) changes.oidc_scopes = [...input.scopes];
  return changes;
}

const lockOut = () =>
  new ApiError(
    'conflict',
    'Nobody has signed in through this connection yet: turning enforcement on now could lock everyone of its domains out. Sign in through it once (last_sign_in_at), then enforce.',
  );

export async function create(ctx: RequestContext, body: Create): Promise<SsoConnection> {
  await requireFeature(ctx.db, ctx.orgId, 'sso');
  const domains = [...new Set(body.domains ?? [])].sort();
  await checkDomains(ctx, domains, null);
  await checkDefaultRole(ctx, body.jit_provisioning?.default_role_id);
  // A connection nobody has signed in through cannot be enforced: the first sign-in proves it works.
  if (body.enforce === true) throw lockOut();
  const id = newId('ssoConnection');
  const saml = body.type === 'saml' && body.saml ? await samlSettings(ctx, body.saml, null) : {};
  const oidc = body.type === 'oidc' && body.oidc ? await oidcSettings(ctx, id, body.oidc) : {};
  const values = {
    id,
    org_id: ctx.orgId,
    name: body.name,
    type: body.type,
    enforce: false,
    jit_enabled: body.jit_provisioning?.enabled ?? false,
    jit_default_role_id: body.jit_provisioning?.default_role_id ?? null,
    ...saml,
    ...oidc,
    ...(body.type === 'oidc' && !oidc.oidc_scopes ? { oidc_scopes: DEFAULT_SCOPES } : {}),
    created_by_user_id: ctx.caller?.userId ?? null,
  };
  const complete = isComplete({
    type: body.type,
    saml_idp_entity_id: null,
    saml_idp_sso_url: null,
    saml_idp_certificates: null,
    oidc_issuer: null,
    oidc_client_id: null,
    oidc_client_secret_enc: null,
    ...saml,
    ...oidc,
  });
  const status = complete ? (body.status ?? 'active') : 'draft';
  const row = await conflictOnUnique(
    DOMAIN_CONSTRAINT,
    () => domainTaken(domains),
    () =>
      conflictOnUnique(
        NAME_CONSTRAINT,
        () => new ApiError('name_taken', `Another SSO connection of this organization is named ${body.name}.`),
        () =>
          ctx.write(async (w) => {
            const inserted = await repo.insertConnection(w.db, { ...values, status });
            await repo.replaceDomains(w.db, ctx.orgId, id, domains);
            w.audit({
              targetId: id,
              changes: {
                name: body.name,
                type: body.type,
                status,
                domains,
                jit_provisioning: { enabled: inserted.jit_enabled, default_role_id: inserted.jit_default_role_id },
              },
            });
            return inserted;
          }),
      ),
  );
  return toSsoConnection(row, domains, ctx.deps.config.baseUrl);
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<SsoConnection> {
  const before = await repo.findConnection(ctx.db, ctx.orgId, id);
  if (!before) throw notFound(WHAT, id);
  if (body.type !== undefined && body.type !== before.type) {
    throw new ApiError('immutable_field', `type cannot change (this connection is ${before.type}); create another connection instead.`, {
      errors: [{ in: 'body', pointer: '/type', message: 'cannot change' }],
    });
  }
  if (body.saml !== undefined && before.type !== 'saml')
    throw validationError([{ in: 'body', pointer: '/saml', message: 'is for SAML connections; this one is oidc' }]);
  if (body.oidc !== undefined && before.type !== 'oidc')
    throw validationError([{ in: 'body', pointer: '/oidc', message: 'is for OpenID Connect connections; this one is saml' }]);
  const domains = body.domains !== undefined ? [...new Set(body.domains)].sort() : undefined;
  if (domains) await checkDomains(ctx, domains, id);
  if (body.jit_provisioning?.default_role_id !== undefined) await checkDefaultRole(ctx, body.jit_provisioning.default_role_id);
  const saml = body.saml ? await samlSettings(ctx, body.saml, before) : {};
  const oidc = body.oidc ? await oidcSettings(ctx, id, body.oidc) : {};
  const result = await conflictOnUnique(
    DOMAIN_CONSTRAINT,
    () => domainTaken(domains ?? []),
    () =>
      conflictOnUnique(
        NAME_CONSTRAINT,
        () => new ApiError('name_taken', `Another SSO connection of this organization is named ${body.name ?? ''}.`),
        () =>
          ctx.write(async (w) => {
            const current = await repo.findConnection(w.db, ctx.orgId, id, true);
            if (!current) throw notFound(WHAT, id);
            const changes: Partial<repo.ConnectionRow> = { ...saml, ...oidc };
            const changed = new Set<string>();
            if (body.saml) changed.add('saml');
            if (body.oidc) changed.add('oidc');
            if (body.name !== undefined && body.name !== current.name) {
              changes.name = body.name;
              changed.add('name');
            }
            if (body.jit_provisioning?.enabled !== undefined && body.jit_provisioning.enabled !== current.jit_enabled) {
              changes.jit_enabled = body.jit_provisioning.enabled;
              changed.add('jit_provisioning');
            }
            if (body.jit_provisioning?.default_role_id !== undefined && body.jit_provisioning.default_role_id !== current.jit_default_role_id) {
              changes.jit_default_role_id = body.jit_provisioning.default_role_id;
              changed.add('jit_provisioning');
            }
            const merged = { ...current, ...changes };
            const complete = isComplete(merged);
            let status = current.status;
            if (body.status === 'active') {
              if (!complete) {
                throw new ApiError(
                  'sso_connection_incomplete',
                  `The connection lacks ${current.type === 'saml' ? 'the IdP entity id, SSO URL or certificate' : 'the issuer, client id or client secret'}; complete it before turning it on.`,
                );
              }
              status = 'active';
            } else if (body.status === 'inactive') {
              status = 'inactive';
            } else if (current.status === 'draft' && complete) {
              status = 'active';
            }
            if (status === 'active' && current.status !== 'active') await requireFeature(w.db, ctx.orgId, 'sso');
            if (status !== current.status) {
              changes.status = status;
              changed.add('status');
            }
            if (body.enforce !== undefined && body.enforce !== current.enforce) {
              if (body.enforce && current.last_sign_in_at === null) throw lockOut();
              changes.enforce = body.enforce;
              changed.add('enforce');
            }
            let servedDomains = (await repo.domainsOf(w.db, [id])).get(id) ?? [];
            if (domains && domains.join(',') !== servedDomains.join(',')) {
              await repo.replaceDomains(w.db, ctx.orgId, id, domains);
              servedDomains = domains;
              changed.add('domains');
            }
            const updated = Object.keys(changes).length > 0 ? await repo.updateConnection(w.db, ctx.orgId, id, changes) : current;
            if (!updated) throw notFound(WHAT, id);
            let sessionsEnded = 0;
            let grantsEnded = 0;
            // Enforcement starting (or reaching new domains) closes the other ways in that are open
            // now: sessions, and MCP clients' grants consented in them.
            if (updated.enforce && updated.status === 'active' && (changed.has('enforce') || changed.has('domains') || changed.has('status'))) {
              const now = new Date();
              sessionsEnded = await repo.endSessionsOutside(w.db, id, servedDomains, now);
              grantsEnded = await revokeGrantsOutside(w.db, id, servedDomains, now);
            }
            w.audit({
              targetId: id,
              changes: {
                changed: [...changed].sort(),
                ...(sessionsEnded > 0 ? { sessions_ended: sessionsEnded } : {}),
                ...(grantsEnded > 0 ? { oauth_grants_ended: grantsEnded } : {}),
              },
            });
            return { row: updated, domains: servedDomains };
          }),
      ),
  );
  return toSsoConnection(result.row, result.domains, ctx.deps.config.baseUrl);
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const deleted = await repo.deleteConnection(w.db, ctx.orgId, id);
    if (!deleted) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { name: deleted.name, type: deleted.type } });
  });
}

/** A connection's default role is what people provisioned at sign-in get: deleting it is refused while one names it. */
export async function roleUsage(db: Executor, orgId: string, roleId: string): Promise<Usage> {
  return { count: await repo.connectionsWithDefaultRole(db, orgId, roleId), what: 'SSO connections (as their default role)' };
}

/** The SSO connection of this organization serving `domain`, if any (deleteOrgDomain refuses while one does). */
export async function connectionServing(db: Executor, orgId: string, domain: string): Promise<{ id: string; name: string } | null> {
  const row = await repo.connectionForDomain(db, domain);
  return row && row.org_id === orgId ? { id: row.id, name: row.name } : null;
}

/**
 * Follows an IdP's certificate rollover: metadata imported by URL is fetched again once a day,
 * when a sign-in through the connection starts (no scheduler needed; an idle connection has
 * nothing to follow). The turn is claimed by a conditional update, so one replica fetches.
 * The new metadata lists every certificate the IdP signs with, the next one published before
 * the switch. A failed fetch keeps the settings and is logged; it is tried again the next day.
 */
export async function refreshSamlMetadata(
  write: <T>(change: (db: Executor) => Promise<T>) => Promise<T>,
  connection: repo.ConnectionRow,
  policy: RequestContext['deps']['config']['outbound'],
  log: RequestContext['log'],
  now = new Date(),
): Promise<repo.ConnectionRow> {
  const url = connection.saml_idp_metadata_url;
  if (!url || (connection.saml_metadata_refreshed_at && connection.saml_metadata_refreshed_at.getTime() > now.getTime() - METADATA_REFRESH_MS))
    return connection;
  const claimed = await write((db) =>
    db
      .updateTable('sso_connections')
      .set({ saml_metadata_refreshed_at: now })
      .where('id', '=', connection.id)
      .where((eb) =>
        eb.or([eb('saml_metadata_refreshed_at', 'is', null), eb('saml_metadata_refreshed_at', '<=', new Date(now.getTime() - METADATA_REFRESH_MS))]),
      )
      .returning('id')
      .executeTakeFirst(),
  );
  if (!claimed) return connection;
  try {
    if (refuseUrl(url, policy)) throw new SamlMetadataInvalid('the metadata URL is no longer allowed');
    const settings = parseIdpMetadata(await fetchMetadata(policy, url));
    // Fetched outside any transaction; the settings written in one of their own.
    const updated = await write((db) =>
      db
        .updateTable('sso_connections')
        .set({ saml_idp_entity_id: settings.entityId.slice(0, 1024), saml_idp_sso_url: settings.ssoUrl, saml_idp_certificates: settings.certificates })
        .where('id', '=', connection.id)
        .returningAll()
        .executeTakeFirst(),
    );
    return updated ?? connection;
  } catch (err) {
    log.warn({ sso_connection_id: connection.id, problem: (err as Error).message }, 'SAML metadata refresh failed; the previous settings stay');
    return connection;
  }
}
