import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A key pair and its self-signed certificate, made by openssl as an identity provider's administrator would. */
export interface KeyPair {
  key: string;
  cert: string;
  /** The certificate's base64 body, as metadata carries it. */
  certBody: string;
}

export function makeKeyPair(cn = 'test-idp', days = 365): KeyPair {
  const dir = mkdtempSync(join(tmpdir(), 'saml-keys-'));
  try {
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'k.pem'), '-out', join(dir, 'c.pem'), '-days', String(days), '-subj', `/CN=${cn}`],
      { stdio: 'ignore' },
    );
    const cert = readFileSync(join(dir, 'c.pem'), 'utf8');
    return { key: readFileSync(join(dir, 'k.pem'), 'utf8'), cert, certBody: cert.replace(/-----[^-]+-----|\s/g, '') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** IdP metadata as Okta or Entra publish it: an entity id, the HTTP-Redirect SSO URL, and its signing certificates. */
export function idpMetadata(entityId: string, ssoUrl: string, certBodies: string[]): string {
  const keys = certBodies
    .map(
      (body) =>
        `<md:KeyDescriptor use="signing"><ds:KeyInfo xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:X509Data><ds:X509Certificate>${body}</ds:X509Certificate></ds:X509Data></ds:KeyInfo></md:KeyDescriptor>`,
    )
    .join('');
  return `<?xml version="1.0" encoding="UTF-8"?>
<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="${entityId}">
  <md:IDPSSODescriptor WantAuthnRequestsSigned="false" protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">
    ${keys}
    <md:NameIDFormat>urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress</md:NameIDFormat>
    <md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST" Location="${ssoUrl}/post"/>
    <md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect" Location="${ssoUrl}"/>
  </md:IDPSSODescriptor>
</md:EntityDescriptor>`;
}
