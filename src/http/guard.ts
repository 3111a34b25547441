import type { Request } from 'express';
import {
  inactiveMember,
  loadMemberAccess,
  membershipStatus,
  type Authenticator,
  type Caller,
  type OrgAccess,
  type PresentedCredential,
} from '../identity/credentials';
import type { CredentialCache } from '../identity/credential-cache';
import type { Db } from '../db/database';
import { isId } from '../lib/ids';
import type { OperationMeta } from '../spec/operations';
import { ApiError, validationError } from './errors';

/** A value now, or later: the guard answers at once when nothing it needs is a round trip away. */
export type Maybe<T> = T | Promise<T>;

/** `next(value)`, now when the value is there, else once it is. A throw from `next` is a throw now, or a rejection later. */
export function chain<T, U>(value: Maybe<T>, next: (value: T) => Maybe<U>): Maybe<U> {
  return value instanceof Promise ? value.then(next) : next(value);
}

export interface GuardDeps {
  db: Db;
  authenticators: ReadonlyMap<string, Authenticator>;
  /** Remembers authenticated credentials and members' standing, forgetting on every change. */
  credentials: CredentialCache;
  /** Before a credential is looked up: throws 429 when its address has failed too often. */
  beforeLookup(req: Request): Maybe<void>;
  /** Counts a failed authentication against the client's address; throws 429 past the limit. */
  countFailure(req: Request): Maybe<void>;
  /** Counts the request against the credential that authenticated; throws 429 past the limit. */
  admitted(caller: Caller): Maybe<void>;
  /** Whether pages of this origin may send the session cookie on a change: this server's and the web app's. */
  firstParty(origin: string): boolean;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * A browser sends the session cookie with a form another site's page submits (SameSite=Lax
 * stops only cross-site subrequests, and a sibling subdomain counts as the same site), so a
 * change made with the cookie must come from a page of ours: the browser's own `Origin` and
 * `Sec-Fetch-Site` say where the page was. A page whose referrer policy is `no-referrer`
 * (ours are) makes the browser send `Origin: null`; then `Sec-Fetch-Site: same-origin` is
 * what vouches for it. Clients that send neither header (curl, a script) are not browsers
 * being misled. Operations marked `x-first-party` (the sign-in confirmations) are held to
 * this whatever credential they carry, or none.
 */
function refuseForeignPage(req: Request, deps: GuardDeps): void {
  if (SAFE_METHODS.has(req.method)) return;
  const site = req.headers['sec-fetch-site'];
  const origin = req.headers.origin;
  const named = typeof origin === 'string' && origin !== '' && origin !== 'null';
  const foreign =
    site === 'cross-site' || (named ? !deps.firstParty(origin) : site === 'same-site' || (origin === 'null' && site !== 'same-origin' && site !== 'none'));
  if (foreign) throw new ApiError('insufficient_access', 'This request must come from a page of this service; it was sent from another site.');
}

export interface Admitted {
  caller: Caller | null;
  /** The organization the request acts in: named by X-Organization-Id, or bound to the credential. */
  org: OrgAccess | null;
}

const requiresPerson = () => new ApiError('requires_person', 'This action is reserved for a person signed in to the web app; API tokens cannot do it.');

// The authenticators of an operation's security schemes, in the spec's order: the same for every request.
const schemesOf = new WeakMap<OperationMeta, Authenticator[]>();

/**
 * Who is calling, under the operation's security schemes. A credential of a kind the
 * operation does not take is refused by name (or, for an API token on a person-only
 * operation, with 403 requires_person); a failed authentication counts against the address.
 */
function schemesFor(meta: OperationMeta, deps: GuardDeps): Authenticator[] {
  let schemes = schemesOf.get(meta);
  if (!schemes) {
    schemes = meta.security.map((name) => deps.authenticators.get(name)).filter((a): a is Authenticator => a !== undefined);
    schemesOf.set(meta, schemes);
  }
  return schemes;
}

function unauthenticated(schemes: Authenticator[]): ApiError {
  const how = schemes.map((a) => a.howToSend).join(', or ') || 'send a credential';
  return new ApiError('unauthenticated', `${how.charAt(0).toUpperCase()}${how.slice(1)}.`);
}

/** The 401 that `guard` answers a caller who sent no credential, when the operation needs one. */
export function refuseMissingCredential(meta: OperationMeta, deps: GuardDeps): void {
  if (meta.security.length > 0 && !meta.credentialOptional) throw unauthenticated(schemesFor(meta, deps));
}

function authenticate(meta: OperationMeta, req: Request, credential: PresentedCredential | null, deps: GuardDeps): Maybe<Caller | null> {
  if (meta.security.length === 0) return null;
  const schemes = schemesFor(meta, deps);
  if (!credential) {
    if (meta.credentialOptional) return null;
    throw unauthenticated(schemes);
  }
  const accepted = schemes.find((a) => a.recognizes(credential));
  const reader = accepted ?? [...deps.authenticators.values()].find((a) => a.recognizes(credential));
  if (!reader) {
    const offered = schemes;
    return chain(deps.countFailure(req), () => {
      throw new ApiError(
        'invalid_token',
        `This operation takes ${offered.map((a) => a.describes).join(' or ') || 'no credential this server issues yet'}; the credential sent is none of them.`,
      );
    });
  }
  if (credential.scheme === 'cookie') refuseForeignPage(req, deps);
  return chain(deps.beforeLookup(req), () =>
    chain(deps.credentials.authenticate(reader, credential, deps.db), (result) => {
      if (result.status === 'invalid') {
        // Where a credential is optional, a browser's stale session cookie means signed out
        // (a bad bearer token is still the caller's mistake to hear about).
        if (meta.credentialOptional && credential.scheme === 'cookie') return null;
        return chain(deps.countFailure(req), () => {
          throw new ApiError('invalid_token', result.detail);
        });
      }
      return chain(deps.admitted(result.caller), () => {
        if (!accepted) {
          if (meta.personOnly && result.caller.kind === 'api_token') throw requiresPerson();
          throw new ApiError('invalid_token', `This operation does not accept ${reader.describes}.`);
        }
        return result.caller;
      });
    }),
  );
}

/** The organization named by X-Organization-Id, and the caller's standing in it. */
function organizationFromHeader(req: Request, caller: Caller, deps: GuardDeps): Maybe<OrgAccess> {
  const { db } = deps;
  const header = req.headers['x-organization-id'];
  if (header === undefined || header === '') {
    throw new ApiError('organization_header_required', 'Name the organization to act in with the X-Organization-Id header; GET /user/me lists yours.');
  }
  if (typeof header !== 'string' || !isId('organization', header)) {
    throw validationError([{ in: 'header', pointer: '/x-organization-id', message: 'must be an organization id (org_…)' }]);
  }
  const found =
    caller.kind === 'session'
      ? deps.credentials.memberAccess(caller.userId, header, () => loadMemberAccess(db, caller.userId, header))
      : caller.kind !== 'oauth_client' && caller.orgId === header
        ? caller.access
        : null;
  return chain(found, (org) => {
    if (!org) {
      if (caller.kind !== 'session') throw new ApiError('not_a_member', `This credential belongs to another organization than ${header}.`);
      return membershipStatus(db, caller.userId, header).then((status) => {
        throw new ApiError('not_a_member', inactiveMember(status, header, 'Your'));
      });
    }
    if (caller.kind === 'session' && org.requireMfa && !caller.secondFactorAt) {
      throw new ApiError(
        'mfa_setup_required',
        `Organization ${header} requires a second factor; verify one (POST /auth/mfa/verify) or enroll TOTP or a passkey first.`,
      );
    }
    return org;
  });
}

/**
 * The whole guard, in the order its answers are documented: authentication (401), the
 * organization (400 header, 403 membership and second factor), person-only actions and the
 * operation's x-permission (403). Nothing after it re-checks any of this. It answers at once
 * (or throws at once) when the credential and the member's standing are remembered and the
 * rate limits are counted in this process; otherwise it answers with a promise.
 */
export function guard(meta: OperationMeta, req: Request, credential: PresentedCredential | null, deps: GuardDeps): Maybe<Admitted> {
  // A session cookie is checked where it is authenticated; a public operation never reads it.
  if (meta.firstParty && (credential?.scheme !== 'cookie' || meta.security.length === 0)) refuseForeignPage(req, deps);
  return chain(authenticate(meta, req, credential, deps), (caller) => {
    const org: Maybe<OrgAccess | null> =
      caller && meta.orgScoped
        ? organizationFromHeader(req, caller, deps)
        : caller && caller.kind !== 'session' && caller.kind !== 'oauth_client'
          ? caller.access
          : null;
    return chain(org, (acting) => {
      if (meta.personOnly && caller && caller.kind !== 'session') throw requiresPerson();
      if (meta.permission && !acting?.permissions.has(meta.permission)) {
        throw new ApiError('missing_permission', `This operation needs the permission ${meta.permission}.`);
      }
      return { caller, org: acting };
    });
  });
}
