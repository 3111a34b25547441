import helmet, { type HelmetOptions } from 'helmet';

/**
 * The security headers, worked out once by running helmet against a recording response and
 * then set as they are, instead of running helmet on every request.
 *
 * Every response carries RESPONSE_SECURITY_HEADERS: what guards an API's answers (OWASP's REST
 * set): no MIME sniffing, HSTS, same-origin resource policy, no Adobe cross-domain policies,
 * and a Content-Security-Policy under which a response opened as a document loads nothing and
 * is framed nowhere (X-Frame-Options, for browsers that know only that, says same origin, as
 * the API reference may be). What browsers apply to documents only (opener policy, origin
 * agent clusters, referrer policy, DNS prefetching, the old XSS filter, IE's download option)
 * is DOCUMENT_SECURITY_HEADERS, which the HTML pages add beside a policy of their own: on every
 * JSON answer they and helmet's policy for pages were half of the headers' bytes.
 */
export const RESPONSE_SECURITY_HEADERS: ReadonlyArray<readonly [string, string]> = recorded({
  contentSecurityPolicy: { useDefaults: false, directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } },
  crossOriginOpenerPolicy: false,
  originAgentCluster: false,
  referrerPolicy: false,
  xDnsPrefetchControl: false,
  xDownloadOptions: false,
  xXssProtection: false,
});

/** Helmet's headers for documents, beside RESPONSE_SECURITY_HEADERS: for the HTML pages, each of which sets its own Content-Security-Policy. */
export const DOCUMENT_SECURITY_HEADERS: Readonly<Record<string, string>> = Object.fromEntries(
  recorded({
    contentSecurityPolicy: false,
    crossOriginResourcePolicy: false,
    strictTransportSecurity: false,
    xContentTypeOptions: false,
    xFrameOptions: false,
    xPermittedCrossDomainPolicies: false,
  }),
);

function recorded(options: HelmetOptions): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  const recorder = {
    setHeader: (name: string, value: string | number | readonly string[]) => headers.push([name, String(value)]),
    removeHeader: () => undefined,
  };
  let finished = false;
  helmet(options)({} as never, recorder as never, () => {
    finished = true;
  });
  if (!finished) throw new Error('helmet did not finish synchronously; its headers cannot be precomputed.');
  return headers;
}
