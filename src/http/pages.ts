import type { IncomingMessage, ServerResponse } from 'node:http';
import { sessionAuthenticator } from '../identity/credentials';
import type { AppDeps } from './context';
import { DOCUMENT_SECURITY_HEADERS } from './security-headers';

/**
 * A page of the web app this server serves (sign-in, confirmation, …): server-rendered HTML
 * that works without JavaScript. `query` is the page URL's query; the page answers with
 * `html` (a full document) or `redirect`.
 */
export type Page = (request: PageRequest, deps: AppDeps) => Promise<PageAnswer> | PageAnswer;

export interface PageRequest {
  query: URLSearchParams;
  /** The session cookie as sent, if any (a page may show who is signed in). */
  sessionCookie: string | null;
}

/**
 * `scripts`: the page loads scripts of this server (WebAuthn has no form-only way); its CSP
 * then allows `script-src 'self'` and `connect-src 'self'`, still nothing inline or foreign.
 * `javascript`: the answer is such a script (an asset path registered as a page).
 */
export type PageAnswer = { html: string; status?: number; scripts?: boolean; formTargets?: readonly string[] } | { redirect: string } | { javascript: string };

/**
 * The CSP `form-action` sources that let a page's form land where its answer redirects:
 * browsers (Chrome) apply `form-action` to the redirects that follow a submit, so a consent
 * form whose answer sends the browser back to an MCP client (`http://127.0.0.1:33418`,
 * `cursor:`) must name it. Null for a target that cannot be named safely.
 */
export function formActionSource(target: string): string | null {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return null;
  }
  if (url.protocol === 'http:' || url.protocol === 'https:') return url.origin;
  return /^[a-z][a-z0-9+.-]*:$/.test(url.protocol) ? url.protocol : null;
}

/** The person a page's session cookie signs in, or null (no cookie, or one that ended). */
export async function signedInPerson(request: PageRequest, deps: AppDeps): Promise<{ userId: string; email: string } | null> {
  if (!request.sessionCookie) return null;
  const result = await sessionAuthenticator.authenticate({ scheme: 'cookie', secret: request.sessionCookie }, deps.db);
  if (result.status !== 'ok' || result.caller.kind !== 'session') return null;
  const user = await deps.db.selectFrom('users').select(['id', 'email']).where('id', '=', result.caller.userId).executeTakeFirst();
  return user ? { userId: user.id, email: user.email } : null;
}

/** Text for HTML: every character that could open markup or end an attribute is escaped. */
export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A tagged template whose interpolations are escaped, unless they are already markup (Html). */
export class Html {
  constructor(readonly markup: string) {}
}
export function html(strings: TemplateStringsArray, ...values: Array<string | number | Html | Html[] | null | undefined | false>): Html {
  let out = strings[0] ?? '';
  values.forEach((value, i) => {
    const parts = Array.isArray(value) ? value : [value];
    for (const part of parts) {
      if (part instanceof Html) out += part.markup;
      else if (part !== null && part !== undefined && part !== false) out += escapeHtml(String(part));
    }
    out += strings[i + 1] ?? '';
  });
  return new Html(out);
}

export const STYLESHEET_PATH = '/assets/web.css';
const STYLESHEET = `
:root { color-scheme: light dark; font-family: system-ui, sans-serif; line-height: 1.5; }
body { max-width: 28rem; margin: 4rem auto; padding: 0 1rem; }
h1 { font-size: 1.5rem; }
label { display: block; font-weight: 600; margin-bottom: .25rem; }
input[type=email], input[type=text] { width: 100%; box-sizing: border-box; padding: .5rem; font: inherit; }
button { margin-top: 1rem; padding: .5rem 1rem; font: inherit; cursor: pointer; }
:focus-visible { outline: 3px solid #2563eb; outline-offset: 2px; }
.notice { padding: .75rem; border-radius: .375rem; background: #dbeafe33; border: 1px solid #2563eb; }
.error { padding: .75rem; border-radius: .375rem; background: #fee2e233; border: 1px solid #b91c1c; }
`;

/** The whole document around a page's content. */
export function layout(title: string, content: Html): string {
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · MCP control plane</title>
        <link rel="stylesheet" href="${STYLESHEET_PATH}" />
      </head>
      <body>
        <main>${content}</main>
      </body>
    </html>`.markup;
}

/**
 * No script, no inline style, nothing from elsewhere, forms only to this server, never in a
 * frame: a page that shows a sign-in link's token leaks it to nobody.
 */
const PAGE_HEADERS = {
  ...DOCUMENT_SECURITY_HEADERS,
  'Content-Security-Policy': "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'Cache-Control': 'no-store',
  'Referrer-Policy': 'no-referrer',
};
const SCRIPT_PAGE_HEADERS = {
  ...PAGE_HEADERS,
  'Content-Security-Policy': `${PAGE_HEADERS['Content-Security-Policy']}; script-src 'self'; connect-src 'self'`,
};

/**
 * Serves the modules' pages (GET and HEAD of their exact paths) and their stylesheet; any
 * other request goes on to the API.
 */
export function servePages(pages: ReadonlyMap<string, Page>, deps: AppDeps, sessionCookie: (req: IncomingMessage) => string | null) {
  return (req: IncomingMessage, res: ServerResponse, next: () => void): void => {
    if (req.method !== 'GET' && req.method !== 'HEAD') return next();
    // Every API request passes here: only a page's own path is worth parsing.
    const raw = req.url ?? '/';
    const end = raw.indexOf('?');
    const path = end === -1 ? raw : raw.slice(0, end);
    if (path !== STYLESHEET_PATH && !pages.has(path)) return next();
    const url = new URL(raw, 'http://page');
    if (url.pathname === STYLESHEET_PATH && pages.size > 0) {
      res.writeHead(200, { 'Content-Type': 'text/css; charset=utf-8', 'Cache-Control': 'public, max-age=3600' });
      res.end(req.method === 'HEAD' ? undefined : STYLESHEET);
      return;
    }
    const page = pages.get(url.pathname);
    if (!page) return next();
    Promise.resolve(page({ query: url.searchParams, sessionCookie: sessionCookie(req) }, deps)).then(
      (answer) => {
        if ('redirect' in answer) {
          res.writeHead(303, { ...PAGE_HEADERS, Location: answer.redirect });
          res.end();
          return;
        }
        if ('javascript' in answer) {
          res.writeHead(200, { ...PAGE_HEADERS, 'Content-Type': 'text/javascript; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
          res.end(req.method === 'HEAD' ? undefined : answer.javascript);
          return;
        }
        const headers: Record<string, string> = { ...(answer.scripts ? SCRIPT_PAGE_HEADERS : PAGE_HEADERS), 'Content-Type': 'text/html; charset=utf-8' };
        const targets = (answer.formTargets ?? []).map(formActionSource).filter((source): source is string => source !== null);
        if (targets.length > 0)
          headers['Content-Security-Policy'] = headers['Content-Security-Policy']!.replace("form-action 'self'", `form-action 'self' ${targets.join(' ')}`);
        res.writeHead(answer.status ?? 200, headers);
        res.end(req.method === 'HEAD' ? undefined : answer.html);
      },
      (err: unknown) => {
        deps.logger.error({ err, path: url.pathname }, 'page failed');
        if (!res.headersSent) res.writeHead(500, { ...PAGE_HEADERS, 'Content-Type': 'text/html; charset=utf-8' });
        res.end(
          layout(
            'Something went wrong',
            html`<h1>Something went wrong</h1>
              <p>Try again in a moment.</p>`,
          ),
        );
      },
    );
  };
}
