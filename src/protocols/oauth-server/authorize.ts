import type { RequestContext } from '../../http/context';
import { ApiError, validationError } from '../../http/errors';
import type { Problem, ProtocolInput, RawInput } from '../../http/handler-types';
import { html, layout, signedInPerson, type Page } from '../../http/pages';
import { refuseProblems } from '../../http/protocol';
import { loadMemberAccess } from '../../identity/credentials';
import { owesSecondFactor } from '../../identity/second-factors';
import { newId } from '../../lib/ids';
import { webAppPage } from '../../lib/web-app';
import { webApp } from '../../areas/auth';
import { ClientLookupError, findClient, isLoopbackRedirect, matchRedirectUri, SUPPORTED_SCOPES, type OAuthClient } from './clients';
import { AUTHORIZATION_REQUEST_MS, GRANT_MS, issueCode, liveGrant, resourceServerId, scopesOf, scopeString } from './grants';

const PARAMETERS = [
  'response_type',
  'client_id',
  'redirect_uri',
  'code_challenge',
  'code_challenge_method',
  'state',
  'scope',
  'resource',
  'nonce',
  'prompt',
] as const;
type Parameter = (typeof PARAMETERS)[number];

/** The request's parameters as sent: a repeated one (RFC 6749 §3.1: "MUST NOT be included more than once") is `repeated`. */
function parametersOf(input: ProtocolInput<{ query: unknown }>): Record<Parameter, string | undefined> & { repeated: Parameter[] } {
  const query = (input.valid ? input.value.query : (input.raw as RawInput).query) as Record<string, unknown>;
  const out = { repeated: [] as Parameter[] } as Record<Parameter, string | undefined> & { repeated: Parameter[] };
  for (const name of PARAMETERS) {
    const value = query?.[name];
    if (Array.isArray(value)) out.repeated.push(name);
    else if (value !== undefined && value !== null) out[name] = String(value);
  }
  return out;
}

/** This request again, as a path a sign-in page may come back to. */
function authorizePath(params: Record<Parameter, string | undefined>): string {
  const query = new URLSearchParams();
  for (const name of PARAMETERS) if (params[name] !== undefined) query.set(name, params[name]!);
  return `/oauth/authorize?${query.toString()}`;
}

/** The client's redirect URI with the response's parameters (those given) added to its own. */
function withParameters(uri: string, values: Record<string, string | undefined>): string {
  const location = new URL(uri);
  for (const [name, value] of Object.entries(values)) if (value !== undefined) location.searchParams.set(name, value);
  return location.href;
}

function redirectBack(uri: string, values: Record<string, string | undefined>) {
  return { status: 302 as const, headers: { Location: withParameters(uri, values), 'Cache-Control': 'no-store' } };
}

const problem = (name: string, message: string): Problem => ({ in: 'query', pointer: `/${name}`, message });

/**
 * The authorization endpoint (RFC 6749 §4.1.1 with PKCE and RFC 8707). Until the client and
 * its redirect URI are known to be good, a problem is answered here (never redirected: that
 * would make an open redirector); after that, every problem goes back to the client with
 * `error`, `state` and `iss` (RFC 9207).
 */
export async function startAuthorization(input: ProtocolInput<{ query: unknown }>, ctx: RequestContext) {
  const params = parametersOf(input);
  const problems = input.valid ? [] : input.problems;
  const base = ctx.deps.config.baseUrl;
  if (params.repeated.includes('client_id') || params.repeated.includes('redirect_uri')) {
    throw validationError(params.repeated.filter((n) => n === 'client_id' || n === 'redirect_uri').map((n) => problem(n, 'is given more than once')));
  }
  if (!params.client_id) throw validationError([problem('client_id', 'is required')]);
  let client: OAuthClient | null;
  try {
    client = await findClient(ctx.db, params.client_id, ctx.deps.config.outbound);
  } catch (err) {
    if (err instanceof ClientLookupError) throw validationError([problem('client_id', err.message)]);
    throw err;
  }
  if (!client)
    throw validationError([problem('client_id', 'names no client of this server: register at /oauth/register, or use a Client ID Metadata Document URL')]);
  const registered = client.info.redirect_uris;
  const redirectUri = params.redirect_uri !== undefined ? matchRedirectUri(registered, params.redirect_uri) : registered.length === 1 ? registered[0]! : null;
  if (!redirectUri) {
    throw validationError([
      problem(
        'redirect_uri',
        params.redirect_uri === undefined ? 'is required: the client registered more than one' : 'is not one of the redirect URIs the client registered',
      ),
    ]);
  }
  const back = { uri: redirectUri, state: params.state, iss: base };
  const refuse = (error: string, description: string) => redirectBack(redirectUri, { error, error_description: description, state: params.state, iss: base });
  const otherProblems = problems.filter((p) => !['/client_id', '/redirect_uri'].includes(p.pointer));
  if (params.repeated.length > 0) return refuse('invalid_request', `${params.repeated.join(', ')} given more than once.`);
  if (otherProblems.length > 0) refuseProblems('oauth', otherProblems, { redirect: back });
  if (params.response_type !== 'code') return refuse('unsupported_response_type', 'response_type must be code.');
  if (!params.code_challenge) return refuse('invalid_request', 'code_challenge is required (PKCE with S256).');
  if (params.code_challenge_method !== 'S256') return refuse('invalid_request', 'code_challenge_method must be S256.');
  const asked = scopesOf(params.scope ?? 'mcp');
  const unknown = asked.filter((s) => !(SUPPORTED_SCOPES as readonly string[]).includes(s));
  if (unknown.length > 0) return refuse('invalid_scope', `Unknown scope ${unknown.join(', ')}; this server grants ${SUPPORTED_SCOPES.join(', ')}.`);
  const allowed = scopesOf(client.info.scope);
  const beyond = asked.filter((s) => !allowed.includes(s));
  if (beyond.length > 0) return refuse('invalid_scope', `The client did not register the scope ${beyond.join(', ')}.`);
  const scope = scopeString(asked);
  if (!params.resource) return refuse('invalid_target', `resource is required: the MCP server's endpoint, ${base}/mcp/mcp_….`);
  const mcpServerId = resourceServerId(base, params.resource);
  if (!mcpServerId) return refuse('invalid_target', `resource must be an MCP server's endpoint on this server, ${base}/mcp/mcp_….`);

  const caller = ctx.caller;
  if (!caller || caller.kind !== 'session') {
    if (params.prompt === 'none') return refuse('login_required', 'The person is not signed in.');
    const signIn = new URL(webAppPage(webApp(ctx), '/sign-in'));
    signIn.searchParams.set('return_to', authorizePath(params));
    return { status: 302 as const, headers: { Location: signIn.href, 'Cache-Control': 'no-store' } };
  }
  if (!caller.secondFactorAt && (await owesSecondFactor(ctx.db, caller.userId))) {
    const page = new URL(webAppPage(webApp(ctx), '/sign-in/second-factor'));
    page.searchParams.set('return_to', authorizePath(params));
    return { status: 302 as const, headers: { Location: page.href, 'Cache-Control': 'no-store' } };
  }
  const server = await ctx.db
    .selectFrom('mcp_servers')
    .select(['id', 'org_id', 'owner_user_id', 'expires_at'])
    .where('id', '=', mcpServerId)
    .executeTakeFirst();
  // Another person's server reads as no server: nothing about it is revealed.
  if (!server || server.owner_user_id !== caller.userId) return refuse('invalid_target', 'resource is not one of your MCP servers.');
  if (server.expires_at && server.expires_at <= new Date()) return refuse('invalid_target', 'The MCP server has expired.');
  const access = await loadMemberAccess(ctx.db, caller.userId, server.org_id);
  if (!access) return refuse('access_denied', 'You are no longer an active member of the MCP server’s organization.');
  if (access.requireMfa && !caller.secondFactorAt) {
    return refuse('access_denied', 'The MCP server’s organization requires a second factor: add one to your account (Account security), then try again.');
  }

  const now = new Date();
  const existing = await liveGrant(ctx.db, caller.userId, server.id, client.id, now);
  const covered = existing && asked.every((s) => scopesOf(existing.scope).includes(s));
  if (covered && params.prompt !== 'consent') {
    // Granted before: no page, straight back with a code (the grant's own audit entry stands).
    const code = await ctx.personalWrite((db) =>
      issueCode(db, {
        grantId: existing.id,
        clientId: client.id,
        redirectUri,
        redirectUriNamed: params.redirect_uri !== undefined,
        codeChallenge: params.code_challenge!,
        scope,
        nonce: params.nonce ?? null,
        authTime: now,
      }),
    );
    return redirectBack(redirectUri, { code, state: params.state, iss: base });
  }
  if (params.prompt === 'none') return refuse('consent_required', 'The person has not granted this client access to this MCP server.');
  const requestId = newId('oauthAuthorizationRequest');
  await ctx.personalWrite((db) =>
    db
      .insertInto('oauth_authorization_requests')
      .values({
        id: requestId,
        user_id: caller.userId,
        client_id: client.id,
        mcp_server_id: server.id,
        redirect_uri: redirectUri,
        redirect_uri_named: params.redirect_uri !== undefined,
        state: params.state ?? null,
        code_challenge: params.code_challenge!,
        scope,
        nonce: params.nonce ?? null,
        auth_time: now,
        expires_at: new Date(now.getTime() + AUTHORIZATION_REQUEST_MS),
      })
      .execute(),
  );
  const consent = new URL(webAppPage(webApp(ctx), '/oauth/consent'));
  consent.searchParams.set('request', requestId);
  return { status: 302 as const, headers: { Location: consent.href, 'Cache-Control': 'no-store' } };
}

/** A pending request of the person's, with what the consent page shows. */
function pendingRequest(ctx: { db: RequestContext['db'] }, requestId: string, userId: string, now = new Date()) {
  return ctx.db
    .selectFrom('oauth_authorization_requests as r')
    .innerJoin('oauth_clients as c', 'c.id', 'r.client_id')
    .innerJoin('mcp_servers as s', 's.id', 'r.mcp_server_id')
    .innerJoin('organizations as o', 'o.id', 's.org_id')
    .select([
      'r.id',
      'r.client_id',
      'r.mcp_server_id',
      'r.redirect_uri',
      'r.redirect_uri_named',
      'r.state',
      'r.code_challenge',
      'r.scope',
      'r.nonce',
      'r.auth_time',
    ])
    .select(['c.kind as client_kind', 'c.metadata as client_metadata', 's.name as server_name', 's.org_id', 's.owner_user_id', 'o.name as org_name'])
    .where('r.id', '=', requestId)
    .where('r.user_id', '=', userId)
    .where('r.expires_at', '>', now)
    .executeTakeFirst();
}

const SCOPE_WORDS: Record<string, string> = {
  mcp: 'Use the tools of this MCP server as you',
  openid: 'Know your account id',
  profile: 'See your name',
  email: 'See your email address',
};

/** The consent page: who asks, where the answer goes, for which MCP server and what. */
export const consentPage: Page = async (request, deps) => {
  const requestId = request.query.get('request') ?? '';
  const me = await signedInPerson(request, deps);
  if (!me) return { redirect: `/sign-in?${new URLSearchParams({ return_to: `/oauth/consent?request=${requestId}` }).toString()}` };
  const pending = /^oar_[0-7][0-9a-hjkmnp-tv-z]{25}$/.test(requestId) ? await pendingRequest(deps, requestId, me.userId) : undefined;
  if (!pending) {
    return {
      status: 404,
      html: layout(
        'Authorization expired',
        html`<h1>This authorization is no longer waiting</h1>
          <p class="error">
            It was already answered, it expired (after 10 minutes), or it was started by someone else. Go back to your MCP client and connect again.
          </p>`,
      ),
    };
  }
  const metadata = pending.client_metadata as { client_name?: string; client_uri?: string };
  const target = new URL(pending.redirect_uri);
  const host = target.protocol === 'http:' || target.protocol === 'https:' ? target.host : `${target.protocol}//${target.host}`;
  const loopback = isLoopbackRedirect(pending.redirect_uri);
  const scopes = scopesOf(pending.scope).filter((s) => SCOPE_WORDS[s]);
  return {
    formTargets: [pending.redirect_uri],
    html: layout(
      'Authorize an MCP client',
      html`<h1>Allow ${metadata.client_name ?? host} to use your MCP server?</h1>
        <p>
          <strong>${metadata.client_name ?? host}</strong> (the name the client gave
          itself${pending.client_kind === 'metadata_document' ? html`, published at ${pending.client_id}` : ''}) asks to act as <strong>${me.email}</strong> on
          the MCP server <strong>${pending.server_name}</strong> of <strong>${pending.org_name}</strong>.
        </p>
        <p>After you answer, your browser goes to <strong>${host}</strong>.</p>
        ${
          loopback
            ? html`<p class="notice">
                That address is on this computer: whatever program is listening there receives the access. Allow it only if you just started connecting from an
                application on this computer.
              </p>`
            : null
        }
        <p>It will be able to:</p>
        <ul>
          ${scopes.map((s) => html`<li>${SCOPE_WORDS[s]!}</li>`)}
        </ul>
        <form method="post" action="/oauth/consent/decision">
          <input type="hidden" name="request" value="${pending.id}" />
          <button type="submit" name="decision" value="approve">Allow</button>
          <button type="submit" name="decision" value="deny">Deny</button>
        </form>
        <p>You can withdraw this access at any time from your account.</p>`,
    ),
  };
};

/** The consent page's answer: a code back to the client, or `access_denied`. */
export async function decideConsent(body: { request: string; decision: 'approve' | 'deny' }, ctx: RequestContext) {
  const person = ctx.person;
  const base = ctx.deps.config.baseUrl;
  const now = new Date();
  const pending = await pendingRequest(ctx, body.request, person.userId, now);
  if (!pending) throw new ApiError('not_found', `No pending authorization request ${body.request} of yours; it was answered, expired, or is not yours.`);
  const headers = (location: string) => ({ Location: location, 'Cache-Control': 'no-store' });
  const back = (values: Record<string, string | undefined>) => withParameters(pending.redirect_uri, values);
  const state = pending.state ?? undefined;
  if (body.decision === 'deny') {
    await ctx.personalWrite((db) => db.deleteFrom('oauth_authorization_requests').where('id', '=', pending.id).execute());
    return { status: 303 as const, headers: headers(back({ error: 'access_denied', error_description: 'The person denied the request.', state, iss: base })) };
  }
  const access = pending.owner_user_id === person.userId ? await loadMemberAccess(ctx.db, person.userId, pending.org_id) : null;
  if (!access) throw new ApiError('not_a_member', 'The MCP server is no longer yours, or you are no longer an active member of its organization.');
  if (access.requireMfa && !person.secondFactorAt) {
    throw new ApiError('mfa_setup_required', 'The MCP server’s organization requires a second factor: verify one (or add one on Account security) first.');
  }
  ctx.actIn(access);
  const code = await ctx.write(async (w) => {
    const taken = await w.db.deleteFrom('oauth_authorization_requests').where('id', '=', pending.id).executeTakeFirst();
    if (Number(taken.numDeletedRows) === 0)
      throw new ApiError('not_found', `No pending authorization request ${body.request} of yours; it was answered, expired, or is not yours.`);
    const existing = await liveGrant(w.db, person.userId, pending.mcp_server_id, pending.client_id, now);
    // The way in the consent was given through: enforcing SSO later ends grants given another way.
    const session = await w.db.selectFrom('sessions').select('sso_connection_id').where('id', '=', person.sessionId).executeTakeFirst();
    const ssoConnectionId = session?.sso_connection_id ?? null;
    let grantId: string;
    let scope: string;
    if (existing) {
      grantId = existing.id;
      scope = scopeString([...scopesOf(existing.scope), ...scopesOf(pending.scope)]);
      await w.db.updateTable('oauth_grants').set({ scope, sso_connection_id: ssoConnectionId }).where('id', '=', grantId).execute();
    } else {
      // A grant the server's token rotation (or its expiry) ended is closed for good before the new one.
      await w.db
        .updateTable('oauth_grants')
        .set({ revoked_at: now })
        .where('user_id', '=', person.userId)
        .where('mcp_server_id', '=', pending.mcp_server_id)
        .where('client_id', '=', pending.client_id)
        .where('revoked_at', 'is', null)
        .execute();
      grantId = newId('oauthGrant');
      scope = pending.scope;
      await w.db
        .insertInto('oauth_grants')
        .values({
          id: grantId,
          org_id: pending.org_id,
          user_id: person.userId,
          mcp_server_id: pending.mcp_server_id,
          client_id: pending.client_id,
          scope,
          sso_connection_id: ssoConnectionId,
          created_at: now,
          expires_at: new Date(now.getTime() + GRANT_MS),
        })
        .execute();
    }
    w.audit({ targetId: grantId, changes: { client_id: pending.client_id, mcp_server_id: pending.mcp_server_id, scope } });
    return issueCode(
      w.db,
      {
        grantId,
        clientId: pending.client_id,
        redirectUri: pending.redirect_uri,
        redirectUriNamed: pending.redirect_uri_named,
        codeChallenge: pending.code_challenge,
        scope: pending.scope,
        nonce: pending.nonce,
        authTime: pending.auth_time,
      },
      now,
    );
  });
  return { status: 303 as const, headers: headers(back({ code, state, iss: base })) };
}
