import { X509Certificate } from 'node:crypto';
import { createRequire } from 'node:module';
import { DOMParser, type Document, type Element } from '@xmldom/xmldom';

// xpath's type declarations pull the browser's DOM library into the whole program (globals such
// as fetch's and Headers' browser types, which then disagree with Node's): it is loaded without
// them, through the one function used here.
const xpath = createRequire(__filename)('xpath') as {
  useNamespaces(namespaces: Record<string, string>): (expression: string, node: unknown) => unknown;
};

/**
 * Reads what a service provider needs from an identity provider's SAML metadata: its entity
 * id, its single sign-on URL for the HTTP-Redirect binding, and every certificate it signs
 * with (the next one of a rollover is published beside the current one). node-saml does not
 * parse metadata. The document is someone's upload or a remote's answer: a DTD (and with it
 * any entity) is refused before parsing, and the size is capped by the caller.
 */

const MD = 'urn:oasis:names:tc:SAML:2.0:metadata';
const DS = 'http://www.w3.org/2000/09/xmldsig#';
const REDIRECT = 'urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect';
const select = xpath.useNamespaces({ md: MD, ds: DS });

/** The metadata or a certificate cannot be used; the message is for the administrator. */
export class SamlMetadataInvalid extends Error {
  override readonly name = 'SamlMetadataInvalid';
}

export interface IdpSettings {
  entityId: string;
  ssoUrl: string;
  /** PEM certificates, the current one first. */
  certificates: string[];
}

export const METADATA_MAX_BYTES = 256 * 1024;

export function parseIdpMetadata(xml: string): IdpSettings {
  if (Buffer.byteLength(xml) > METADATA_MAX_BYTES) throw new SamlMetadataInvalid(`The metadata is larger than ${METADATA_MAX_BYTES / 1024} KiB.`);
  if (/<!DOCTYPE/i.test(xml) || /<!ENTITY/i.test(xml)) throw new SamlMetadataInvalid('The metadata has a DTD; SAML metadata never needs one.');
  let doc: Document;
  try {
    doc = new DOMParser({
      onError: (level: string, message: string) => {
        if (level !== 'warning') throw new SamlMetadataInvalid(`The metadata is not well-formed XML: ${message.split('\n')[0]}`);
      },
    }).parseFromString(xml, 'text/xml');
  } catch (err) {
    if (err instanceof SamlMetadataInvalid) throw err;
    throw new SamlMetadataInvalid('The metadata is not well-formed XML.');
  }
  const root = doc.documentElement;
  if (!root) throw new SamlMetadataInvalid('The metadata is empty.');
  // An EntitiesDescriptor with one IdP inside is accepted as well as a bare EntityDescriptor.
  const entity = (select('//md:EntityDescriptor[md:IDPSSODescriptor]', doc) as Element[])[0];
  if (!entity) throw new SamlMetadataInvalid('The metadata has no EntityDescriptor with an IDPSSODescriptor.');
  const entityId = entity.getAttribute('entityID');
  if (!entityId) throw new SamlMetadataInvalid('The EntityDescriptor has no entityID.');
  const idp = (select('md:IDPSSODescriptor', entity) as Element[])[0]!;
  const sso = (select(`md:SingleSignOnService[@Binding='${REDIRECT}']`, idp) as Element[])[0];
  const ssoUrl = sso?.getAttribute('Location');
  if (!ssoUrl) throw new SamlMetadataInvalid('The identity provider lists no SingleSignOnService for the HTTP-Redirect binding.');
  const certs = (select("md:KeyDescriptor[not(@use) or @use='signing']/ds:KeyInfo/ds:X509Data/ds:X509Certificate", idp) as Element[]).map((node) =>
    toPem((node.textContent ?? '').replace(/\s+/g, '')),
  );
  if (certs.length === 0) throw new SamlMetadataInvalid('The identity provider lists no signing certificate.');
  const unique = [...new Set(certs)];
  for (const pem of unique) describeCertificate(pem);
  return { entityId, ssoUrl, certificates: unique };
}

function toPem(base64: string): string {
  const lines = base64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join('\n')}\n-----END CERTIFICATE-----\n`;
}

/** The certificate's SHA-256 fingerprint and end of validity; throws when it is no X.509 certificate. */
export function describeCertificate(pem: string): { fingerprint: string; notAfter: Date; pem: string } {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch {
    throw new SamlMetadataInvalid('A certificate is not a valid X.509 certificate in PEM form.');
  }
  return { fingerprint: cert.fingerprint256, notAfter: new Date(cert.validTo), pem: cert.toString() };
}
