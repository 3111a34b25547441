import type { Request } from 'express';
import { inactiveMember, loadMemberAccess, membershipStatus, type Authenticator, type Caller, type OrgAccess, type PresentedCredential } from '../auth/credentials';
import type { CredentialCache } from '../auth/credential-cache';
import type { Db } from '../db/database';
import { isId } from '../lib/ids';
import type { OperationMeta } from '../spec/operations';
import { ApiError, validationError } from './errors';

export interface GuardDeps {
  db: Db;
  authenticators: ReadonlyMap<string, Authenticator>;
  /** Remembers authenticated credentials and members' standing, forgetting on every change. */
  credentials: CredentialCache;
  /** Before a credential is looked up: throws 429 when its address has failed too often. */
  beforeLookup(req: Request): Promise<void>;
  /** Counts a failed authentication against the client's address; throws 429 past the limit. */
  countFailure(req: Request): Promise<void>;
  /** Counts the request against the credential that authenticated; throws 429 past the limit. */
  admitted(caller: Caller): Promise<void>;
}

export interface Admitted {
  caller: Caller | null;
  /** The organization the request acts in: named by X-Organization-Id, or bound to the credential. */
  org: OrgAccess | null;
}

const requiresPerson = () =>
  new ApiError('requires_person', 'This action is reserved for a person signed in to the web app; API tokens cannot do it.');

/**
 * Who is calling, under the operation's security schemes. A credential of a kind the
 * operation does not take is refused by name (or, for an API token on a person-only
 * operation, with 403 requires_person); a failed authentication counts against the address.
 */
async function authenticate(meta: OperationMeta, req: Request, credential: PresentedCredential | null, deps: GuardDeps): Promise<Caller | null> {
  if (meta.security.length === 0) return null;
  const schemes = meta.security.map((name) => deps.authenticators.get(name)).filter((a): a is Authenticator => a !== undefined);
  if (!credential) {
    if (meta.credentialOptional) return null;
    const how = schemes.map((a) => a.howToSend).join(', or ') || 'send a credential';
    throw new ApiError('unauthenticated', `${how.charAt(0).toUpperCase()}${how.slice(1)}.`);
  }
  const accepted = schemes.find((a) => a.recognizes(credential));
  const reader = accepted ?? [...deps.authenticators.values()].find((a) => a.recognizes(credential));
  if (!reader) {
    await deps.countFailure(req);
    throw new ApiError('invalid_token', `This operation takes ${schemes.map((a) => a.describes).join(' or ') || 'no credential this server issues yet'}; the credential sent is none of them.`);
  }
  await deps.beforeLookup(req);
  const result = await deps.credentials.authenticate(reader, credential, deps.db);
  if (result.status === 'invalid') {
    await deps.countFailure(req);
    throw new ApiError('invalid_token', result.detail);
  }
  await deps.admitted(result.caller);
  if (!accepted) {
    if (meta.personOnly && result.caller.kind === 'api_token') throw requiresPerson();
    throw new ApiError('invalid_token', `This operation does not accept ${reader.describes}.`);
  }
  return result.caller;
}

/** The organization named by X-Organization-Id, and the caller's standing in it. */
async function organizationFromHeader(req: Request, caller: Caller, deps: GuardDeps): Promise<OrgAccess> {
  const { db } = deps;
  const header = req.headers['x-organization-id'];
  if (header === undefined || header === '') {
    throw new ApiError('organization_header_required', 'Name the organization to act in with the X-Organization-Id header; GET /user/me lists yours.');
  }
  if (typeof header !== 'string' || !isId('organization', header)) {
    throw validationError([{ in: 'header', pointer: '/x-organization-id', message: 'must be an organization id (org_…)' }]);
  }
  const org =
    caller.kind === 'session'
      ? await deps.credentials.memberAccess(caller.userId, header, () => loadMemberAccess(db, caller.userId, header))
      : caller.orgId === header
        ? caller.access
        : null;
  if (!org) {
    throw new ApiError('not_a_member', caller.kind === 'session'
      ? inactiveMember(await membershipStatus(db, caller.userId, header), header, 'Your')
      : `This credential belongs to another organization than ${header}.`);
  }
  if (caller.kind === 'session' && org.requireMfa && !caller.secondFactorAt) {
    throw new ApiError('mfa_setup_required', `Organization ${header} requires a second factor; verify one (POST /auth/mfa/verify) or enroll TOTP or a passkey first.`);
  }
  return org;
}

/**
 * The whole guard, in the order its answers are documented: authentication (401), the
 * organization (400 header, 403 membership and second factor), person-only actions and the
 * operation's x-permission (403). Nothing after it re-checks any of this.
 */
export async function guard(meta: OperationMeta, req: Request, credential: PresentedCredential | null, deps: GuardDeps): Promise<Admitted> {
  const caller = await authenticate(meta, req, credential, deps);
  let org: OrgAccess | null = null;
  if (caller && meta.orgScoped) org = await organizationFromHeader(req, caller, deps);
  else if (caller && caller.kind !== 'session') org = caller.access;
  if (meta.personOnly && caller && caller.kind !== 'session') throw requiresPerson();
  if (meta.permission && !org?.permissions.has(meta.permission)) {
    throw new ApiError('missing_permission', `This operation needs the permission ${meta.permission}.`);
  }
  return { caller, org };
}
