import type { components } from '../../generated/openapi';

export type ErrorCode = components['schemas']['ErrorCode'];
export type ErrorBody = components['schemas']['Error'];
export type ValidationProblem = components['schemas']['ValidationProblem'];

/**
 * Status and title of every code. Typed by the spec's ErrorCode enum in both directions:
 * a code added to the spec without an entry here, or an entry the spec lacks, does not compile.
 */
export const ERROR_CATALOG: { readonly [C in ErrorCode]: { status: number; title: string } } = {
  validation_failed: { status: 400, title: 'Request is not valid' },
  malformed_json: { status: 400, title: 'Body is not valid JSON' },
  invalid_cursor: { status: 400, title: 'Cursor is not valid' },
  organization_header_required: { status: 400, title: 'Organization header required' },
  immutable_field: { status: 400, title: 'Member cannot change' },
  outbound_url_not_allowed: { status: 400, title: 'URL not allowed' },
  secret_required: { status: 400, title: 'Secret required' },
  upstream_credentials_rejected: { status: 400, title: 'Upstream refused the credentials' },
  idp_metadata_invalid: { status: 400, title: 'Identity provider settings not usable' },
  dynamic_toolbox_immutable: { status: 400, title: 'Dynamic toolbox cannot change' },
  unknown_reference: { status: 400, title: 'Reference not found' },
  file_size_mismatch: { status: 400, title: 'File size does not match' },
  file_type_mismatch: { status: 400, title: 'File type not accepted' },
  invalid_tool_arguments: { status: 400, title: 'Tool arguments not valid' },
  verification_failed: { status: 400, title: 'Verification failed' },
  challenge_expired: { status: 400, title: 'Challenge expired' },
  domain_not_allowed: { status: 400, title: 'Domain cannot be claimed' },
  unauthenticated: { status: 401, title: 'Authentication required' },
  invalid_token: { status: 401, title: 'Credential not valid' },
  missing_permission: { status: 403, title: 'Permission missing' },
  not_a_member: { status: 403, title: 'Not a member of the organization' },
  mfa_setup_required: { status: 403, title: 'Second factor required' },
  requires_person: { status: 403, title: 'Reserved for a person' },
  step_up_required: { status: 403, title: 'Fresh second factor required' },
  not_connection_owner: { status: 403, title: 'Not the owner of the connection' },
  sso_required: { status: 403, title: 'Single sign-on required' },
  entitlement_exceeded: { status: 403, title: 'Plan limit reached' },
  insufficient_access: { status: 403, title: 'Access not sufficient' },
  cannot_resolve_own_request: { status: 403, title: 'Cannot resolve own request' },
  tool_restricted: { status: 403, title: 'Tool restricted' },
  permission_escalation: { status: 403, title: 'Permission escalation' },
  not_found: { status: 404, title: 'Not found' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  conflict: { status: 409, title: 'Conflict' },
  name_taken: { status: 409, title: 'Name already in use' },
  last_owner: { status: 409, title: 'Last owner' },
  slug_taken: { status: 409, title: 'Slug already in use' },
  built_in_connector_read_only: { status: 409, title: 'Built-in connector is read-only' },
  connector_in_use: { status: 409, title: 'Connector in use' },
  connector_not_forked: { status: 409, title: 'Connector is not a fork' },
  upstream_connector_missing: { status: 409, title: 'Upstream connector missing' },
  upstream_changed: { status: 409, title: 'Upstream changed' },
  connection_needs_reauth: { status: 409, title: 'Connection needs reconnecting' },
  mfa_required_by_organization: { status: 409, title: 'Second factor required by an organization' },
  invalid_transition: { status: 409, title: 'Status does not allow this' },
  access_request_exists: { status: 409, title: 'Access request exists' },
  restriction_not_requestable: { status: 409, title: 'Restriction takes no requests' },
  upload_request_full: { status: 409, title: 'Upload request full' },
  upload_incomplete: { status: 409, title: 'Upload incomplete' },
  connection_unavailable: { status: 409, title: 'Connection unavailable' },
  domain_not_verified: { status: 409, title: 'Domain not verified' },
  sso_connection_incomplete: { status: 409, title: 'SSO connection incomplete' },
  system_role_immutable: { status: 409, title: 'System role cannot change' },
  role_in_use: { status: 409, title: 'Role in use' },
  team_in_use: { status: 409, title: 'Team in use' },
  already_member: { status: 409, title: 'Already a member' },
  invite_pending: { status: 409, title: 'Invite already pending' },
  domain_taken: { status: 409, title: 'Domain already claimed' },
  domain_in_use: { status: 409, title: 'Domain in use' },
  subscription_active: { status: 409, title: 'Subscription active' },
  payload_too_large: { status: 413, title: 'Body too large' },
  unsupported_media_type: { status: 415, title: 'Media type not supported' },
  rate_limited: { status: 429, title: 'Too many requests' },
  internal_error: { status: 500, title: 'Internal error' },
  not_implemented: { status: 501, title: 'Not implemented' },
  upstream_unavailable: { status: 502, title: 'Upstream unavailable' },
  service_unavailable: { status: 503, title: 'Service unavailable' },
  payment_provider_unavailable: { status: 503, title: 'Payment provider unavailable' },
};

/** An error a client caused or must react to. Thrown anywhere; rendered once as the Error object. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  readonly status: number;

  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    readonly options: { errors?: ValidationProblem[]; headers?: Record<string, string> } = {},
  ) {
    super(detail);
    this.status = ERROR_CATALOG[code].status;
  }
}

export function errorBody(code: ErrorCode, detail: string, requestId: string, errors: ValidationProblem[] = []): ErrorBody {
  const { status, title } = ERROR_CATALOG[code];
  return { type: `/problems/${code}`, title, status, code, detail, request_id: requestId, errors };
}

/** At most this many problems are listed: a 100,000-item array must not answer with megabytes of errors. */
export const MAX_LISTED_PROBLEMS = 50;

/** 400 validation_failed listing the problems found (the first MAX_LISTED_PROBLEMS; `detail` gives the total). */
export function validationError(problems: ValidationProblem[], total = problems.length): ApiError {
  const count = Math.max(total, problems.length);
  const listed = problems.slice(0, MAX_LISTED_PROBLEMS);
  const which = count > listed.length ? `; errors lists the first ${listed.length}` : '; see errors';
  return new ApiError('validation_failed', `The request has ${count} problem${count === 1 ? '' : 's'}${which}.`, { errors: listed });
}

/** The answer of an operation the contract has but the server does not build yet. */
export const notImplementedError = (operationId: string): ApiError =>
  new ApiError('not_implemented', `${operationId} is part of the contract but not built yet.`);

export const notFound = (what: string, id: string): ApiError => new ApiError('not_found', `No ${what} ${id} in this organization.`);

/** Postgres unique-violation on the named constraint (works for pg and PGlite errors alike). */
export function isUniqueViolation(err: unknown, constraint: string): boolean {
  const e = err as { code?: string; constraint?: string; message?: string } | null;
  return !!e && e.code === '23505' && (e.constraint === constraint || (e.message ?? '').includes(`"${constraint}"`));
}

/**
 * Runs a write whose unique constraint may be broken by a concurrent or repeated request:
 * that failure surfaces when the statement (or the transaction) fails, and becomes the
 * area's 409 (`name_taken`, `slug_taken`, …) instead of a 500.
 */
export async function conflictOnUnique<T>(constraint: string, conflict: () => ApiError, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (isUniqueViolation(err, constraint)) throw conflict();
    throw err;
  }
}
