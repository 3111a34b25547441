import { SAML, ValidateInResponseTo, type CacheProvider, type Profile } from '@node-saml/node-saml';
import { DOMParser } from '@xmldom/xmldom';
import type { Config } from '../../config';

/**
 * One SSO connection as a SAML service provider, with node-saml set deliberately rather than
 * left at its defaults (research/identity.md §3.2):
 * - assertions must be signed; the response may be signed or not, as the IdP does (Entra
 *   signs only the assertion by default);
 * - SHA-256 for our signatures;
 * - `InResponseTo` always checked, against requests kept in the database (any replica may
 *   receive the answer; node-saml's in-memory cache is neither shared nor per IdP);
 * - a stated clock skew, and assertions older than their NotOnOrAfter or MAX_ASSERTION_AGE
 *   refused;
 * - no RequestedAuthnContext (Entra's AADSTS75011 for Windows Hello or MFA sign-ins), and no
 *   NameIDPolicy format (an emailAddress policy fails Entra users without a mailbox);
 * - the IdP's entity id checked as the assertion's issuer; every certificate the IdP may sign
 *   with during a rollover accepted.
 * node-saml reads the identity only from the bytes its signature check covered.
 */

export const CLOCK_SKEW_MS = 120_000;
export const MAX_ASSERTION_AGE_MS = 10 * 60_000;
export const REQUEST_LIFETIME_MS = 10 * 60_000;

export interface SpConnection {
  spEntityId: string;
  acsUrl: string;
  idpEntityId: string;
  idpSsoUrl: string;
  idpCertificates: string[];
}

export function serviceProvider(connection: SpConnection, sp: Config['samlSp'], cache: CacheProvider): SAML {
  return new SAML({
    issuer: connection.spEntityId,
    audience: connection.spEntityId,
    callbackUrl: connection.acsUrl,
    entryPoint: connection.idpSsoUrl,
    idpIssuer: connection.idpEntityId,
    idpCert: connection.idpCertificates,
    wantAssertionsSigned: true,
    wantAuthnResponseSigned: false,
    signatureAlgorithm: 'sha256',
    digestAlgorithm: 'sha256',
    validateInResponseTo: ValidateInResponseTo.always,
    requestIdExpirationPeriodMs: REQUEST_LIFETIME_MS,
    cacheProvider: cache,
    acceptedClockSkewMs: CLOCK_SKEW_MS,
    maxAssertionAgeMs: MAX_ASSERTION_AGE_MS,
    disableRequestedAuthnContext: true,
    identifierFormat: null,
    ...(sp.privateKey ? { privateKey: sp.privateKey, publicCert: sp.certificate ?? undefined } : {}),
  });
}

/** The SP metadata: entity id, ACS (HTTP-POST), signing certificates (current and next), email NameID. */
export function spMetadata(connection: Pick<SpConnection, 'spEntityId' | 'acsUrl'>, sp: Config['samlSp']): string {
  const saml = new SAML({
    issuer: connection.spEntityId,
    callbackUrl: connection.acsUrl,
    idpCert: 'unused',
    wantAssertionsSigned: true,
    identifierFormat: 'urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress',
    ...(sp.privateKey ? { privateKey: sp.privateKey } : {}),
  });
  const certs = [sp.certificate, sp.nextCertificate].filter((c): c is string => c !== null);
  return saml.generateServiceProviderMetadata(null, certs.length > 0 ? certs : null);
}

// The names the usual identity providers give an address, a display name and an object id.
const EMAIL = [
  'email',
  'mail',
  'http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress', // Entra, ADFS
  'urn:oid:0.9.2342.19200300.100.1.3', // Shibboleth (eduPerson mail)
  'Email',
  'emailAddress',
];
const NAME = [
  'http://schemas.microsoft.com/identity/claims/displayname',
  'http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name',
  'urn:oid:2.16.840.1.113730.3.1.241', // displayName
  'displayName',
  'name',
];
const OBJECT_ID = ['http://schemas.microsoft.com/identity/claims/objectidentifier'];

const first = (profile: Profile, names: readonly string[]): string | null => {
  for (const name of names) {
    const value = profile[name];
    const one = Array.isArray(value) ? value[0] : value;
    if (typeof one === 'string' && one.trim() !== '') return one.trim();
  }
  return null;
};

/**
 * The checks node-saml 5.1.0 leaves out (found by this service's tests): the assertion's
 * Issuer is the IdP's entity id, its bearer SubjectConfirmation's Recipient is our ACS URL
 * (both from the signed assertion), and the Response's Destination, when present, is our ACS
 * URL and its top-level status is Success. The last two are read from the Response, which
 * the IdP may leave unsigned: they can only refuse, never supply identity.
 */
export function checkResponse(profile: Profile, connection: Pick<SpConnection, 'acsUrl' | 'idpEntityId'>): string | null {
  if (profile.issuer !== connection.idpEntityId) return 'the assertion names another issuer';
  const assertion = (profile.getAssertion?.() as { Assertion?: any } | undefined)?.Assertion;
  const confirmations: any[] = assertion?.Subject?.[0]?.SubjectConfirmation ?? [];
  const bearer = confirmations.filter((c) => c?.$?.Method === 'urn:oasis:names:tc:SAML:2.0:cm:bearer');
  if (bearer.length === 0) return 'the assertion has no bearer subject confirmation';
  if (!bearer.every((c) => c?.SubjectConfirmationData?.[0]?.$?.Recipient === connection.acsUrl)) return 'the subject confirmation names another Recipient';
  const response = profile.getSamlResponseXml?.();
  if (!response) return 'no response';
  const doc = new DOMParser({ onError: () => undefined }).parseFromString(response, 'text/xml');
  const root = doc.documentElement;
  if (!root || root.localName !== 'Response' || root.namespaceURI !== 'urn:oasis:names:tc:SAML:2.0:protocol') return 'not a SAML Response';
  const destination = root.getAttribute('Destination');
  if (destination && destination !== connection.acsUrl) return 'the response names another Destination';
  const child = (parent: { childNodes: ArrayLike<unknown> }, name: string) =>
    Array.from(parent.childNodes as ArrayLike<{ localName?: string }>).find((n) => n.localName === name) as
      { childNodes: ArrayLike<unknown>; getAttribute(name: string): string | null } | undefined;
  const status = child(root, 'Status');
  const code = status && child(status, 'StatusCode');
  if (code?.getAttribute('Value') !== 'urn:oasis:names:tc:SAML:2.0:status:Success') return 'the response status is not Success';
  return null;
}

export interface SamlIdentity {
  issuer: string;
  subject: string;
  email: string | null;
  name: string | null;
  objectId: string | null;
  assertionId: string | null;
  /** Until when the assertion could be presented: its id is kept that long, to refuse a replay. */
  notOnOrAfter: Date;
}

/** What a validated profile says, from the signed assertion only. */
export function identityOf(profile: Profile, now = new Date()): SamlIdentity {
  const email = first(profile, EMAIL) ?? (/^[^@\s]+@[^@\s]+$/.test(profile.nameID) ? profile.nameID : null);
  const assertion = (profile.getAssertion?.() as { Assertion?: any } | undefined)?.Assertion;
  const assertionId: string | null = assertion?.$?.ID ?? null;
  const conditions = assertion?.Conditions?.[0]?.$?.NotOnOrAfter as string | undefined;
  const confirmation = assertion?.Subject?.[0]?.SubjectConfirmation?.[0]?.SubjectConfirmationData?.[0]?.$?.NotOnOrAfter as string | undefined;
  const ends = [conditions, confirmation].map((v) => (v ? Date.parse(v) : NaN)).filter((v) => Number.isFinite(v));
  const notOnOrAfter = new Date(Math.max(now.getTime() + MAX_ASSERTION_AGE_MS, ...ends) + CLOCK_SKEW_MS);
  return {
    issuer: profile.issuer,
    subject: profile.nameID,
    email: email && email.length <= 254 ? email.toLowerCase() : null,
    name: first(profile, NAME)?.slice(0, 200) ?? null,
    objectId: first(profile, OBJECT_ID),
    assertionId,
    notOnOrAfter,
  };
}
