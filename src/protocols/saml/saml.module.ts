import { randomBytes } from 'node:crypto';
import type { CacheProvider } from '@node-saml/node-saml';
import { flowCookie, flowFailed, flowOf, signIn, signInFailed, withClearedFlow } from '../../areas/auth';
import { connectionById, refreshSamlMetadata, samlUrls, ssoAccount, usableConnection, type SsoConnectionRow } from '../../areas/sso-connections';
import type { Executor } from '../../db/database';
import { defineModule } from '../../http/area';
import type { RequestContext } from '../../http/context';
import { ApiError } from '../../http/errors';
import type { OperationInput, ProtocolInput } from '../../http/handler-types';
import { refuseProblems } from '../../http/protocol';
import { describeCertificate } from './metadata';
import { checkResponse, identityOf, REQUEST_LIFETIME_MS, serviceProvider, spMetadata, type SamlIdentity } from './service-provider';

/**
 * Enterprise sign-in through an organization's SAML connection: the SP metadata, the signed
 * AuthnRequest out (HTTP-Redirect), and the assertion consumer (HTTP-POST). Only answers to
 * our own requests are taken (IdP-initiated responses are refused): the request is kept in
 * the database under its id (InResponseTo) and the RelayState that names it, and, where the
 * browser still sends cookies on the IdP's cross-site post, the flow cookie binds the answer
 * to the browser that started it (login CSRF).
 */

const flowKey = (connectionId: string) => `saml:${connectionId}`;

async function connectionOf(ctx: RequestContext, id: string): Promise<SsoConnectionRow> {
  const connection = await usableConnection(ctx.db, id, 'saml');
  if (!connection) throw new ApiError('not_found', `No SAML SSO connection ${id} is turned on.`);
  return connection;
}

function spOf(ctx: RequestContext, connection: SsoConnectionRow) {
  const urls = samlUrls(ctx.deps.config.baseUrl, connection.id);
  return {
    spEntityId: urls.sp_entity_id,
    acsUrl: urls.acs_url,
    idpEntityId: connection.saml_idp_entity_id as string,
    idpSsoUrl: connection.saml_idp_sso_url as string,
    // As the contract says, sign-in fails once a certificate has expired (node-saml does not
    // look at dates): of a rollover's pair, the one still valid signs.
    idpCertificates: (connection.saml_idp_certificates ?? []).filter((pem) => describeCertificate(pem).notAfter.getTime() > Date.now()),
  };
}

/** node-saml's request store, in the database: one pending request, bound to its connection and RelayState. */
function requestStore(
  db: Executor,
  connectionId: string,
  pending: { relayState: string; returnTo: string | null } | { id: string; createdAt: Date },
): CacheProvider {
  return {
    async saveAsync(key, value) {
      if (!('relayState' in pending)) return null;
      await db
        .insertInto('saml_requests')
        .values({
          id: key,
          connection_id: connectionId,
          relay_state: pending.relayState,
          return_to: pending.returnTo,
          expires_at: new Date(Date.now() + REQUEST_LIFETIME_MS),
        })
        .execute();
      return { value, createdAt: Date.now() };
    },
    // Only the request the RelayState named is known: an InResponseTo of another request, or of another connection, is not.
    async getAsync(key) {
      return 'id' in pending && key === pending.id ? pending.createdAt.toISOString() : null;
    },
    async removeAsync(key) {
      if (key) await db.deleteFrom('saml_requests').where('id', '=', key).where('connection_id', '=', connectionId).execute();
      return key;
    },
  };
}

export default defineModule({
  name: 'SAML sign-in',
  handlers: {
    /** GET /auth/saml/{connectionId}/metadata */
    async getSamlMetadata({ params }: OperationInput<'getSamlMetadata'>, ctx: RequestContext) {
      // A draft's metadata too: the IdP's administrator needs it before the connection is complete.
      const connection = await connectionById(ctx.db, params.connectionId);
      if (connection?.type !== 'saml') throw new ApiError('not_found', `No SAML SSO connection ${params.connectionId}.`);
      const urls = samlUrls(ctx.deps.config.baseUrl, connection.id);
      return { status: 200, body: spMetadata({ spEntityId: urls.sp_entity_id, acsUrl: urls.acs_url }, ctx.deps.config.samlSp), contentType: 'application/xml' };
    },

    /** GET /auth/saml/{connectionId}/login */
    async startSamlLogin({ params, query }: OperationInput<'startSamlLogin'>, ctx: RequestContext) {
      const connection = await refreshSamlMetadata(
        (change) => ctx.personalWrite(change),
        await connectionOf(ctx, params.connectionId),
        ctx.deps.config.outbound,
        ctx.log,
      );
      if (spOf(ctx, connection).idpCertificates.length === 0) {
        ctx.log.warn({ sso_connection_id: connection.id }, 'every IdP certificate of the SAML connection has expired');
        return signInFailed(ctx, 'provider_error');
      }
      const relayState = `lr_${randomBytes(18).toString('base64url')}`;
      let requestId: string | null = null;
      const location = await ctx.personalWrite(async (db) => {
        // Requests never answered go after their ten minutes, so public starts cannot pile rows up.
        await db.deleteFrom('saml_requests').where('expires_at', '<', new Date()).execute();
        const store = requestStore(db, connection.id, { relayState, returnTo: query.return_to ?? null });
        const saml = serviceProvider(spOf(ctx, connection), ctx.deps.config.samlSp, {
          ...store,
          saveAsync: async (key, value) => {
            requestId = key;
            return store.saveAsync(key, value);
          },
        });
        // Entra and Okta take login_hint on the request URL to preselect the account.
        return saml.getAuthorizeUrlAsync(relayState, undefined, query.login_hint ? { additionalParams: { login_hint: query.login_hint } } : {});
      });
      return {
        status: 302,
        headers: {
          Location: location,
          'Set-Cookie': flowCookie(ctx, { provider: flowKey(connection.id), requestId: requestId ?? undefined, returnTo: query.return_to ?? null }, true),
        },
      };
    },

    /** POST /auth/saml/{connectionId}/acs */
    async consumeSamlAssertion(input: ProtocolInput<OperationInput<'consumeSamlAssertion'>>, ctx: RequestContext) {
      if (!input.valid) refuseProblems('saml', input.problems);
      const { params, body } = input.value;
      const connection = await connectionOf(ctx, params.connectionId);
      const pending =
        typeof body.RelayState === 'string'
          ? await ctx.db
              .selectFrom('saml_requests')
              .selectAll()
              .where('relay_state', '=', body.RelayState)
              .where('connection_id', '=', connection.id)
              .where('expires_at', '>', new Date())
              .executeTakeFirst()
          : undefined;
      // No pending request of ours: an unsolicited (IdP-initiated) response, a stale or a forged one.
      if (!pending) return flowFailed(ctx, 'invalid_state');
      // Where the browser sent its flow cookie on the IdP's post, it must be this request's:
      // another person's response posted into this browser does not sign it in.
      // A browser that blocks third-party cookies sends none: the RelayState and InResponseTo
      // checks are then what remains.
      const flow = flowOf(ctx, flowKey(connection.id));
      if (flow && flow.requestId !== pending.id) return flowFailed(ctx, 'invalid_state');
      let identity: SamlIdentity;
      try {
        const saml = serviceProvider(
          spOf(ctx, connection),
          ctx.deps.config.samlSp,
          requestStore(ctx.db, connection.id, {
            id: pending.id,
            createdAt: new Date(pending.expires_at.getTime() - REQUEST_LIFETIME_MS),
          }),
        );
        const { profile } = await saml.validatePostResponseAsync({ SAMLResponse: body.SAMLResponse });
        if (!profile) throw new Error('no profile');
        const problem = checkResponse(profile, spOf(ctx, connection));
        if (problem) throw new Error(problem);
        identity = identityOf(profile);
      } catch (err) {
        ctx.log.warn({ sso_connection_id: connection.id, problem: (err as Error).message?.slice(0, 500) }, 'SAML response refused');
        return flowFailed(ctx, 'provider_error');
      }
      let joined = false;
      const answer = await ctx.personalWrite(async (db) => {
        await db.deleteFrom('saml_requests').where('id', '=', pending.id).execute();
        await db.deleteFrom('saml_used_assertions').where('expires_at', '<', new Date()).execute();
        // An assertion is good once (SAML profiles §4.1.4.5): its id is kept until it expires.
        const fresh = identity.assertionId
          ? await db
              .insertInto('saml_used_assertions')
              .values({ connection_id: connection.id, assertion_id: identity.assertionId, expires_at: identity.notOnOrAfter })
              .onConflict((oc) => oc.columns(['connection_id', 'assertion_id']).doNothing())
              .returning('assertion_id')
              .executeTakeFirst()
          : undefined;
        if (!fresh) {
          ctx.log.warn({ sso_connection_id: connection.id }, 'SAML assertion replayed or without an id');
          return flowFailed(ctx, 'provider_error');
        }
        const outcome = await ssoAccount(db, connection, identity, ctx.trace);
        if ('reason' in outcome) return flowFailed(ctx, outcome.reason);
        joined = outcome.joined;
        return withClearedFlow(await signIn(ctx, db, outcome.userId, pending.return_to, { method: 'sso', ssoConnectionId: connection.id }));
      });
      if (joined) ctx.deps.onEvent?.(ctx.operationId, 'member.joined');
      return answer;
    },
  },
});
