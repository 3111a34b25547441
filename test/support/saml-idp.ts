import { randomBytes } from 'node:crypto';
import { idpMetadata, makeKeyPair, type KeyPair } from './saml-keys';

/**
 * A SAML identity provider for tests, built with samlify (an independent implementation of
 * the IdP side): it answers an SP's AuthnRequest with a signed response (the assertion
 * signed, as Entra does by default), and lets a test change any value of the response before
 * signing (`values`) or its signed XML afterwards (`tamper`), to build the attacks the service
 * must refuse.
 */

// samlify is CommonJS.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const samlify = require('samlify');
samlify.setSchemaValidator({ validate: async () => 'skipped' });

export interface SamlUser {
  nameId: string;
  attributes?: Record<string, string>;
}

export interface ResponseOptions {
  /** Template values to override (ID, AssertionID, Destination, SubjectRecipient, Audience, ConditionsNotOnOrAfter, InResponseTo…). */
  values?: Record<string, string>;
  /** Changes the signed XML before it is encoded. */
  tamper?: (xml: string) => string;
  /** Signs with another key (an IdP the connection does not trust). */
  keys?: KeyPair;
}

export interface SamlIdp {
  entityId: string;
  ssoUrl: string;
  keys: KeyPair;
  metadata: string;
  /** The base64 SAMLResponse answering `requestId` for the SP described by `spMetadata`. */
  respond(spMetadata: string, requestId: string, user: SamlUser, options?: ResponseOptions): Promise<string>;
}

const iso = (ms: number) => new Date(ms).toISOString();

export function startSamlIdp(ssoUrl = 'https://idp.test/sso/saml'): SamlIdp {
  const entityId = `http://idp.test/${randomBytes(4).toString('hex')}`;
  const keys = makeKeyPair('test-saml-idp');
  const metadata = idpMetadata(entityId, ssoUrl, [keys.certBody]);

  return {
    entityId,
    ssoUrl,
    keys,
    metadata,
    async respond(spMetadata, requestId, user, options = {}) {
      const signing = options.keys ?? keys;
      const idp = samlify.IdentityProvider({
        entityID: entityId,
        signingCert: signing.cert,
        privateKey: signing.key,
        wantAuthnRequestsSigned: false,
        singleSignOnService: [{ Binding: 'urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect', Location: ssoUrl }],
        singleLogoutService: [{ Binding: 'urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect', Location: `${ssoUrl}/logout` }],
        loginResponseTemplate: {
          context: samlify.SamlLib.defaultLoginResponseTemplate.context,
          attributes: Object.keys(user.attributes ?? {}).map((name, i) => ({
            name,
            // samlify names the value's tag `attr` + the tag capitalized: `{attrV0}`.
            valueTag: `v${i}`,
            nameFormat: 'urn:oasis:names:tc:SAML:2.0:attrname-format:uri',
            valueXsiType: 'xs:string',
          })),
        },
      });
      const sp = samlify.ServiceProvider({ metadata: spMetadata });
      const acs = /AssertionConsumerService[^>]*Location="([^"]+)"/.exec(spMetadata)?.[1] as string;
      const audience = /entityID="([^"]+)"/.exec(spMetadata)?.[1] as string;
      const now = Date.now();
      const replacer = (template: string) => {
        const id = `_${randomBytes(16).toString('hex')}`;
        const values: Record<string, string> = {
          ID: id,
          AssertionID: `_${randomBytes(16).toString('hex')}`,
          Destination: acs,
          Audience: audience,
          EntityID: audience,
          SubjectRecipient: acs,
          Issuer: entityId,
          IssueInstant: iso(now),
          StatusCode: 'urn:oasis:names:tc:SAML:2.0:status:Success',
          ConditionsNotBefore: iso(now - 60_000),
          ConditionsNotOnOrAfter: iso(now + 5 * 60_000),
          SubjectConfirmationDataNotOnOrAfter: iso(now + 5 * 60_000),
          NameIDFormat: 'urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress',
          NameID: user.nameId,
          InResponseTo: requestId,
          AuthnStatement: `<saml:AuthnStatement AuthnInstant="${iso(now)}" SessionIndex="_s${randomBytes(4).toString('hex')}"><saml:AuthnContext><saml:AuthnContextClassRef>urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport</saml:AuthnContextClassRef></saml:AuthnContext></saml:AuthnStatement>`,
          ...Object.fromEntries(Object.values(user.attributes ?? {}).map((value, i) => [`attrV${i}`, value])),
          ...options.values,
        };
        return { id: values.ID, context: samlify.SamlLib.replaceTagsByValue(template, values) };
      };
      const { context } = await idp.createLoginResponse(sp, { extract: { request: { id: requestId } } }, 'post', { email: user.nameId }, replacer);
      if (!options.tamper) return context as string;
      const xml = Buffer.from(context as string, 'base64').toString('utf8');
      return Buffer.from(options.tamper(xml), 'utf8').toString('base64');
    },
  };
}
