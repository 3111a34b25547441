import { randomBytes } from 'node:crypto';
import { domainToASCII } from 'node:url';
import type { components } from '../../../generated/openapi';
import type { Executor } from '../../db/database';
import { seatsInUse } from '../../access/seats';
import { requireFeature, requireWithinLimit } from '../../access/entitlements';
import { appendEvents } from '../../events/outbox';
import type { RequestContext } from '../../http/context';
import { ApiError, conflictOnUnique, notFound, validationError } from '../../http/errors';
import { toPage, type Page, type PageRequest } from '../../http/pagination';
import { newId } from '../../lib/ids';
import type { Usage } from '../../http/hooks';
import { systemRoleId } from '../roles';
import { addMember } from '../members';
import { connectionServing } from '../sso-connections';
import { checkGrantable, resolveRoles } from '../invites';
import { lookupTxt } from './dns';
import * as repo from './org-domains.repo';
import { insertAuditEntries } from '../../events/records';

type OrgDomain = components['schemas']['OrgDomain'];
type Create = components['schemas']['OrgDomainCreate'];
type Update = components['schemas']['OrgDomainUpdate'];
type VerifyResult = components['schemas']['OrgDomainVerifyResult'];

const WHAT = 'claimed domain';
export const RECORD_PREFIX = '_mcp-control-plane';
const VALUE_PREFIX = 'mcp-control-plane-verification=';
/** At most one DNS lookup per domain in this time. */
export const CHECK_INTERVAL_MS = 10_000;
const CLAIM_CONSTRAINT = 'org_domains_org_id_domain_key';
const VERIFIED_CONSTRAINT = 'org_domains_verified_domain_key';
const DOMAIN_PATTERN = /^(?=.{4,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]$/;

/**
 * Names nobody can prove to own for their people: public suffixes under which anyone
 * registers (the common multi-label ones; single labels fail the pattern already) and shared
 * email providers. Not the whole Public Suffix List: a name under a suffix is claimable.
 */
const NOT_CLAIMABLE = new Set([
  'co.uk',
  'org.uk',
  'ac.uk',
  'gov.uk',
  'me.uk',
  'ltd.uk',
  'plc.uk',
  'net.uk',
  'com.au',
  'net.au',
  'org.au',
  'edu.au',
  'gov.au',
  'co.nz',
  'org.nz',
  'co.jp',
  'ne.jp',
  'or.jp',
  'ac.jp',
  'co.in',
  'net.in',
  'org.in',
  'co.za',
  'org.za',
  'com.br',
  'net.br',
  'org.br',
  'com.cn',
  'net.cn',
  'org.cn',
  'com.mx',
  'com.ar',
  'com.tr',
  'com.sg',
  'com.hk',
  'com.tw',
  'co.kr',
  'co.il',
  'com.es',
  'co.id',
  'github.io',
  'gitlab.io',
  'herokuapp.com',
  'vercel.app',
  'netlify.app',
  'pages.dev',
  'workers.dev',
  'web.app',
  'firebaseapp.com',
  'appspot.com',
  'azurewebsites.net',
  'cloudfront.net',
  'blogspot.com',
  'wordpress.com',
  'fly.dev',
  'onrender.com',
  'ngrok.io',
  'gmail.com',
  'googlemail.com',
  'outlook.com',
  'hotmail.com',
  'hotmail.co.uk',
  'live.com',
  'msn.com',
  'yahoo.com',
  'yahoo.co.uk',
  'ymail.com',
  'icloud.com',
  'me.com',
  'mac.com',
  'aol.com',
  'proton.me',
  'protonmail.com',
  'pm.me',
  'gmx.com',
  'gmx.de',
  'gmx.net',
  'web.de',
  'mail.com',
  'yandex.com',
  'yandex.ru',
  'mail.ru',
  'zoho.com',
  'hey.com',
  'fastmail.com',
  'tutanota.com',
  'tuta.io',
  'qq.com',
  '163.com',
  '126.com',
  'naver.com',
  'hanmail.net',
  'rediffmail.com',
  'seznam.cz',
  'orange.fr',
  'free.fr',
  'laposte.net',
]);

export function toOrgDomain(row: repo.DomainRow): OrgDomain {
  return {
    id: row.id,
    domain: row.domain,
    status: row.status,
    verification: { type: 'TXT', name: `${RECORD_PREFIX}.${row.domain}`, value: row.verification_value },
    verified_at: row.verified_at?.toISOString() ?? null,
    last_checked_at: row.last_checked_at?.toISOString() ?? null,
    last_check_error: row.last_check_error,
    auto_join: row.auto_join,
    default_role_id: row.default_role_id,
    created_by_user_id: row.created_by_user_id,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Lowercase, without a trailing dot, internationalized labels as `xn--`; 400 when it is no DNS name. */
export function normalizeDomain(input: string): string {
  const ascii = domainToASCII(input.trim().replace(/\.$/, '').toLowerCase());
  if (!DOMAIN_PATTERN.test(ascii)) {
    throw validationError([{ in: 'body', pointer: '/domain', message: 'must be a fully qualified DNS name such as acme.example' }]);
  }
  return ascii;
}

const taken = (domain: string) => new ApiError('domain_taken', `${domain} is verified by another organization, or claimed by this one already.`);

/** A default role must be this organization's, not Owner, and grant only what the caller holds. */
async function checkDefaultRole(ctx: RequestContext, roleId: string | null | undefined): Promise<void> {
  if (!roleId) return;
  const [role] = await resolveRoles(ctx.db, ctx.orgId, [roleId], () => '/default_role_id');
  if (role?.system_key === 'owner') {
    throw validationError([{ in: 'body', pointer: '/default_role_id', message: 'cannot be the Owner role; people joining by domain get a lesser role' }]);
  }
  await checkGrantable(ctx, role ? [role] : []);
}

export async function list(ctx: RequestContext, page: PageRequest, filter: { status?: repo.DomainStatus }): Promise<Page<OrgDomain>> {
  return toPage(await repo.listDomains(ctx.db, ctx.orgId, page, filter), page, toOrgDomain);
}

export async function get(ctx: RequestContext, id: string): Promise<OrgDomain> {
  const row = await repo.findDomain(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  return toOrgDomain(row);
}

export async function create(ctx: RequestContext, body: Create): Promise<OrgDomain> {
  const domain = normalizeDomain(body.domain);
  if (NOT_CLAIMABLE.has(domain)) {
    throw new ApiError('domain_not_allowed', `${domain} is a public suffix or a shared email provider; claim your organization's own domain.`, {
      errors: [{ in: 'body', pointer: '/domain', message: 'is a public suffix or a shared email provider' }],
    });
  }
  await requireFeature(ctx.db, ctx.orgId, 'org_domains');
  await checkDefaultRole(ctx, body.default_role_id);
  if (await repo.verifiedElsewhere(ctx.db, domain, ctx.orgId)) throw taken(domain);
  const id = newId('orgDomain');
  const value = `${VALUE_PREFIX}${randomBytes(24).toString('base64url')}`;
  const row = await conflictOnUnique(
    CLAIM_CONSTRAINT,
    () => taken(domain),
    () =>
      ctx.write(async (w) => {
        const inserted = await repo.insertDomain(w.db, {
          id,
          org_id: ctx.orgId,
          domain,
          verification_value: value,
          auto_join: body.auto_join ?? false,
          default_role_id: body.default_role_id ?? null,
          created_by_user_id: ctx.caller?.userId ?? null,
        });
        w.audit({ targetId: id, changes: { domain, auto_join: inserted.auto_join, default_role_id: inserted.default_role_id } });
        return inserted;
      }),
  );
  return toOrgDomain(row);
}

export async function update(ctx: RequestContext, id: string, body: Update): Promise<OrgDomain> {
  // Another organization's domain is a 404 whatever the body names.
  if (!(await repo.findDomain(ctx.db, ctx.orgId, id))) throw notFound(WHAT, id);
  if (body.default_role_id !== undefined) await checkDefaultRole(ctx, body.default_role_id);
  const row = await ctx.write(async (w) => {
    const current = await repo.findDomain(w.db, ctx.orgId, id, true);
    if (!current) throw notFound(WHAT, id);
    const changes: { auto_join?: boolean; default_role_id?: string | null } = {};
    const audit: Record<string, unknown> = {};
    if (body.auto_join !== undefined && body.auto_join !== current.auto_join) {
      changes.auto_join = body.auto_join;
      audit.auto_join = { from: current.auto_join, to: body.auto_join };
    }
    if (body.default_role_id !== undefined && body.default_role_id !== current.default_role_id) {
      changes.default_role_id = body.default_role_id;
      audit.default_role_id = { from: current.default_role_id, to: body.default_role_id };
    }
    const updated = Object.keys(changes).length > 0 ? await repo.updateDomain(w.db, ctx.orgId, id, changes) : current;
    if (!updated) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: audit });
    return updated;
  });
  return toOrgDomain(row);
}

export async function remove(ctx: RequestContext, id: string): Promise<void> {
  await ctx.write(async (w) => {
    const current = await repo.findDomain(w.db, ctx.orgId, id, true);
    if (!current) throw notFound(WHAT, id);
    // The people of a domain an SSO connection serves sign in through it: the connection lets it go first.
    const serving = await connectionServing(w.db, ctx.orgId, current.domain);
    if (serving) {
      throw new ApiError(
        'domain_in_use',
        `${current.domain} is served by the SSO connection ${serving.name} (${serving.id}); remove it from that connection's domains first.`,
      );
    }
    const deleted = await repo.deleteDomain(w.db, ctx.orgId, id);
    if (!deleted) throw notFound(WHAT, id);
    w.audit({ targetId: id, changes: { domain: deleted.domain, status: deleted.status } });
  });
}

async function takeCheckTurn(ctx: RequestContext, id: string, now: Date): Promise<repo.DomainRow> {
  const claimed = await repo.claimCheck(ctx.db, ctx.orgId, id, now, CHECK_INTERVAL_MS);
  if (claimed) return claimed;
  const row = await repo.findDomain(ctx.db, ctx.orgId, id);
  if (!row) throw notFound(WHAT, id);
  const seconds = Math.max(1, Math.ceil(((row.last_checked_at?.getTime() ?? 0) + CHECK_INTERVAL_MS - now.getTime()) / 1000));
  throw new ApiError('rate_limited', `${row.domain} was looked up moments ago; verify again in ${seconds} seconds.`, {
    headers: { 'Retry-After': String(seconds) },
  });
}

const clip = (values: readonly string[]) => values.slice(0, 20).map((v) => v.slice(0, 255));

export async function verify(ctx: RequestContext, id: string): Promise<VerifyResult> {
  const current = await repo.findDomain(ctx.db, ctx.orgId, id);
  if (!current) throw notFound(WHAT, id);
  if (current.status === 'verified') {
    // Checked no more; the answer is still recorded, as every check is.
    await ctx.write(async (w) => w.audit({ targetId: id, changes: { domain: current.domain, outcome: 'verified', looked_up: false } }));
    return { status: 'verified', failure_reason: null, error: null, found_values: [], domain: toOrgDomain(current) };
  }
  if (await repo.verifiedElsewhere(ctx.db, current.domain, ctx.orgId)) throw taken(current.domain);
  const row = await takeCheckTurn(ctx, id, new Date());
  const name = `${RECORD_PREFIX}.${row.domain}`;
  const { servers, timeoutMs } = ctx.deps.config.dns;
  const lookup = await lookupTxt(name, servers, timeoutMs);
  const found = lookup.status === 'found' ? lookup.values : [];
  let failure: VerifyResult['failure_reason'] = null;
  let error: string | null = null;
  if (lookup.status === 'not_found') {
    failure = 'record_not_found';
    error = `No TXT record at ${name}; DNS changes can take a while to appear.`;
  } else if (lookup.status === 'error') {
    failure = 'dns_error';
    error = `Looking up ${name} failed (${lookup.code}); try again in a while.`;
    ctx.log.info({ domain_id: id, code: lookup.code }, 'domain verification lookup failed');
  } else if (!found.includes(row.verification_value)) {
    failure = 'value_mismatch';
    error = `The TXT record at ${name} does not hold the expected value.`;
  }
  const updated = await conflictOnUnique(
    VERIFIED_CONSTRAINT,
    () => taken(row.domain),
    () =>
      ctx.write(async (w) => {
        const now = new Date();
        const changed =
          failure === null
            ? await repo.updateDomain(w.db, ctx.orgId, id, { status: 'verified', verified_at: now, last_check_error: null })
            : await repo.updateDomain(w.db, ctx.orgId, id, { status: 'failed', last_check_error: error });
        if (!changed) throw notFound(WHAT, id);
        w.audit({ targetId: id, changes: { domain: row.domain, outcome: failure === null ? 'verified' : 'failed', failure_reason: failure, looked_up: true } });
        if (failure === null) w.emit('org_domain.verified', { org_domain: { id, domain: row.domain } });
        return changed;
      }),
  );
  return { status: failure === null ? 'verified' : 'failed', failure_reason: failure, error, found_values: clip(found), domain: toOrgDomain(updated) };
}

export interface JoinableOrganization {
  orgId: string;
  orgName: string;
  domainId: string;
  domain: string;
  /** The role a person joining by this domain receives. */
  roleId: string;
}

/**
 * The organizations a person with this email address may join without an invite: those that
 * verified the address's domain (exactly that name, not a parent) and turned auto-join on.
 * Sign-in flows call this, then make the person a member (`via: verified_domain`) of the
 * ones they are not a member of yet. The role is the domain's default, or Member.
 */
export async function joinableOrganizationsFor(db: Executor, email: string): Promise<JoinableOrganization[]> {
  const at = email.lastIndexOf('@');
  if (at < 1) return [];
  const domain = domainToASCII(
    email
      .slice(at + 1)
      .trim()
      .replace(/\.$/, '')
      .toLowerCase(),
  );
  if (!DOMAIN_PATTERN.test(domain)) return [];
  const rows = await repo.autoJoinDomains(db, domain);
  return Promise.all(
    rows.map(async (row) => ({
      orgId: row.org_id,
      orgName: row.org_name,
      domainId: row.id,
      domain: row.domain,
      roleId: row.default_role_id ?? (await systemRoleId(db, row.org_id, 'member')),
    })),
  );
}

/** A domain's default role is what people joining through it get: deleting that role is refused while a domain names it (the roleUsage hook). */
export async function roleUsage(db: Executor, orgId: string, roleId: string): Promise<Usage> {
  return { count: await repo.domainsWithDefaultRole(db, orgId, roleId), what: 'organization domains (as their default role)' };
}

/**
 * Makes a new account a member of every organization that verified its email's domain and
 * turned auto-join on, with the domain's default role (or Member): audit `member.joined`
 * there, event `member.joined`. An organization with no seat left is skipped (the person
 * can still be invited once one frees up). In the caller's transaction.
 */
export async function joinVerifiedDomains(
  db: Executor,
  user: { id: string; email: string; name: string | null },
  client: { ip?: string | null; userAgent?: string | null; requestId?: string | null } = {},
): Promise<string[]> {
  const joined: string[] = [];
  for (const org of await joinableOrganizationsFor(db, user.email)) {
    const member = await db.selectFrom('memberships').select('status').where('org_id', '=', org.orgId).where('user_id', '=', user.id).executeTakeFirst();
    if (member) continue;
    try {
      await requireWithinLimit(db, org.orgId, 'seats', () => seatsInUse(db, org.orgId, {}));
    } catch (err) {
      if (err instanceof ApiError && err.code === 'entitlement_exceeded') continue;
      throw err;
    }
    await addMember(db, { orgId: org.orgId, userId: user.id, via: 'verified_domain', roleIds: [org.roleId] });
    await insertAuditEntries(db, {
      id: newId('auditEvent'),
      org_id: org.orgId,
      actor_type: 'user',
      actor_id: user.id,
      actor_user_id: user.id,
      action: 'member.joined',
      target_type: 'member',
      target_id: user.id,
      changes: JSON.stringify({ via: 'verified_domain', domain: org.domain, role_ids: [org.roleId] }),
      ip: client.ip ?? null,
      user_agent: client.userAgent ?? null,
      request_id: client.requestId ?? null,
    });
    await appendEvents(
      db,
      org.orgId,
      [{ type: 'member.joined', data: { member: { user_id: user.id, email: user.email, name: user.name }, via: 'verified_domain' } }],
      {
        actor_type: 'user',
        actor_id: user.id,
      },
    );
    joined.push(org.orgId);
  }
  return joined;
}
