import { promises as dns } from 'node:dns';

export type TxtLookup = { status: 'found'; values: string[] } | { status: 'not_found' } | { status: 'error'; code: string };

const NOT_FOUND = new Set(['ENODATA', 'ENOTFOUND', 'NOTFOUND', 'NODATA']);

/**
 * The TXT records at `name`, through a resolver asking `servers` (the system's when empty),
 * bounded by `timeoutMs` in all: past it the lookup is cancelled and answers an error. Each
 * record's character strings are joined, as DNS splits long values into 255-byte pieces.
 */
export async function lookupTxt(name: string, servers: readonly string[], timeoutMs: number): Promise<TxtLookup> {
  const resolver = new dns.Resolver({ timeout: Math.max(50, Math.floor(timeoutMs / 2)), tries: 2 });
  if (servers.length > 0) resolver.setServers([...servers]);
  const timer = setTimeout(() => resolver.cancel(), timeoutMs);
  try {
    const records = await resolver.resolveTxt(name);
    const values = records.map((chunks) => chunks.join(''));
    return values.length === 0 ? { status: 'not_found' } : { status: 'found', values };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'EUNKNOWN';
    return NOT_FOUND.has(code) ? { status: 'not_found' } : { status: 'error', code };
  } finally {
    clearTimeout(timer);
  }
}
