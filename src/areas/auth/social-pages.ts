import type { AppDeps } from '../../http/context';
import { html, type Html } from '../../http/pages';

/**
 * The sign-in page's social providers: plain links, not forms. The pages' CSP allows forms
 * to post only to this server, and browsers apply `form-action` to the redirect that follows
 * a submit too, which would stop the one to the provider.
 */
export function socialSignInLinks(deps: AppDeps, returnTo: string | null): Html | null {
  const providers = deps.config.socialProviders;
  if (providers.length === 0) return null;
  const query = returnTo ? `?${new URLSearchParams({ return_to: returnTo }).toString()}` : '';
  return html`<nav aria-label="Sign in with">
    <ul>
      ${providers.map((p) => html`<li><a href="/auth/sso/${p.key}${query}">Continue with ${p.name}</a></li>`)}
    </ul>
  </nav>`;
}
