/**
 * A page of the web app: `path` (a `return_to` a person or a link brought) on the web app's
 * address; anything that would leave it lands on `fallback` instead. Browsers drop tabs and
 * newlines from URLs and read `\` as `/`, so `/\t/evil.example` is `//evil.example` to them,
 * another host: the path is resolved as a browser would resolve it, and kept only when it
 * stays on the web app's origin, under its path.
 */
export function webAppPage(webAppUrl: string, path: string | null | undefined, fallback = '/'): string {
  const base = new URL(webAppUrl);
  const prefix = base.pathname.replace(/\/+$/, '');
  const resolved = (candidate: string): URL | null => {
    if (!candidate.startsWith('/')) return null;
    try {
      const url = new URL(`${prefix}${candidate}`, base.origin);
      return url.origin === base.origin && url.pathname.startsWith(`${prefix}/`) ? url : null;
    } catch {
      return null;
    }
  };
  return (resolved(path ?? fallback) ?? resolved(fallback) ?? new URL(`${prefix}/`, base.origin)).href;
}
