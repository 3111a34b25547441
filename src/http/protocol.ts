// Protocol operations (`x-protocol` in the spec) own their wire format: the router hands their
// handlers the problems it found instead of refusing the request, and this is how a handler
// turns those problems into its protocol's refusal.
import type { Protocol } from '../spec/operations';
import type { RenderedError } from './area';
import { ApiError, MAX_LISTED_PROBLEMS, validationError } from './errors';
import type { Problem } from './handler-types';

export type { Protocol } from '../spec/operations';

/**
 * A refusal of a protocol operation's request, carrying its protocol's default rendering. The
 * operation's area renders it first when it has a renderer (it knows its protocol's finer
 * points, as the MCP endpoint does for `MCP-Protocol-Version`); otherwise `rendered` is sent, or
 * the Error object when the protocol has no error format of its own.
 */
export class ProtocolRefusal extends ApiError {
  constructor(
    readonly protocol: Protocol,
    readonly problems: Problem[],
    readonly rendered: RenderedError | null,
  ) {
    const error = validationError(problems);
    super('validation_failed', error.detail, error.options);
  }
}

export interface RefusalOptions {
  /**
   * OAuth authorization requests only: where to send the browser back with the error
   * (RFC 6749 §4.1.2.1). Only a redirect URI already checked against the client's
   * registration may be named: an unchecked one makes an open redirector.
   */
  redirect?: { uri: string; state?: string; iss?: string };
}

const SCIM_ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';
// JSON-RPC 2.0's "Invalid Request"; src/mcp names it too, but src/http may not import from there.
const JSON_RPC_INVALID_REQUEST = -32600;

/** The problems in one sentence, for protocols whose errors carry a description but no list. */
export function describeProblems(problems: readonly Problem[]): string {
  const listed = problems.slice(0, 5).map((p) => `${p.in} ${p.pointer || '/'} ${p.message}`);
  const more = problems.length > listed.length ? `; and ${problems.length - listed.length} more` : '';
  return `${listed.join('; ')}${more}`.slice(0, 1000);
}

/** The OAuth error code for a request's problems (RFC 6749 §4.1.2.1 and §5.2, RFC 8707 §2). */
function oauthErrorCode(problems: readonly Problem[]): string {
  const at = (name: string) => problems.some((p) => (p.in === 'query' || p.in === 'body') && p.pointer.split('/')[1] === name);
  if (at('grant_type')) return 'unsupported_grant_type';
  if (at('response_type')) return 'unsupported_response_type';
  if (at('resource')) return 'invalid_target';
  if (at('scope')) return 'invalid_scope';
  return 'invalid_request';
}

function render(protocol: Protocol, problems: Problem[], options: RefusalOptions): RenderedError | null {
  const description = describeProblems(problems);
  switch (protocol) {
    case 'oauth': {
      const error = oauthErrorCode(problems);
      if (options.redirect) {
        const location = new URL(options.redirect.uri);
        location.searchParams.set('error', error);
        location.searchParams.set('error_description', description);
        if (options.redirect.state !== undefined) location.searchParams.set('state', options.redirect.state);
        if (options.redirect.iss !== undefined) location.searchParams.set('iss', options.redirect.iss);
        return { status: 302, contentType: 'text/plain', body: '', headers: { Location: location.href, 'Cache-Control': 'no-store' } };
      }
      return { status: 400, contentType: 'application/json', body: { error, error_description: description }, headers: { 'Cache-Control': 'no-store' } };
    }
    case 'scim': {
      // A resource id that cannot be one names nothing: identity providers' test runs (Okta,
      // Entra) send random ids and expect SCIM's 404, not a complaint about its form.
      if (problems.every((p) => p.in === 'path')) {
        return { status: 404, contentType: 'application/scim+json', body: { schemas: [SCIM_ERROR], status: '404', detail: 'Resource not found.' } };
      }
      return {
        status: 400,
        contentType: 'application/scim+json',
        body: { schemas: [SCIM_ERROR], status: '400', scimType: 'invalidValue', detail: description },
      };
    }
    case 'jsonrpc':
      return {
        status: 400,
        contentType: 'application/json',
        body: {
          jsonrpc: '2.0',
          id: null,
          error: { code: JSON_RPC_INVALID_REQUEST, message: `Invalid Request: ${description}`, data: { problems: problems.slice(0, MAX_LISTED_PROBLEMS) } },
        },
      };
    // Browser flows (sign-in callbacks): their handlers show a page when they can; without one the Error object says what was wrong.
    case 'oidc':
    case 'saml':
      return null;
  }
}

/**
 * Refuses a protocol operation's request for its problems, in the protocol's form: an OAuth
 * error (JSON, or a redirect back to the client), a SCIM error (404 for a malformed resource
 * id), a JSON-RPC "Invalid Request", or the Error object for sign-in callbacks. Thrown, so
 * that it reads as the router's refusals do: `if (!input.valid) refuseProblems('scim', input.problems)`.
 */
export function refuseProblems(protocol: Protocol, problems: Problem[], options: RefusalOptions = {}): never {
  throw new ProtocolRefusal(protocol, problems, render(protocol, problems, options));
}
