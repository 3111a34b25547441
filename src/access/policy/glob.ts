// RestrictionToolPattern: a glob over tool names. `*` matches any run of characters (also
// none), `?` exactly one, every other character itself, case-sensitively; the whole name
// must match. No regular expression is built from the pattern (nothing to inject, and no
// backtracking blow-up on patterns like `*a*a*a*b`): a linear scan that remembers the last
// `*`, O(pattern × name) at worst.

export type GlobMatcher = (name: string) => boolean;

/** Compiles a pattern once; the matcher it returns is pure and allocation-free. */
export function compileGlob(pattern: string): GlobMatcher {
  // Collapse runs of `*` (they mean the same as one).
  const p = pattern.replace(/\*+/g, '*');
  if (!p.includes('*') && !p.includes('?')) return (name) => name === p;
  if (p === '*') return () => true;
  if (!p.includes('?')) {
    // Only `*`: the first piece is a prefix, the last a suffix, the middle ones found in
    // order, each leftmost (greedy leftmost is exact when `*` is the only wildcard).
    const pieces = p.split('*');
    const prefix = pieces[0] as string;
    const suffix = pieces[pieces.length - 1] as string;
    const middle = pieces.slice(1, -1).filter((piece) => piece !== '');
    const minLength = prefix.length + suffix.length + middle.reduce((sum, piece) => sum + piece.length, 0);
    return (name) => {
      if (name.length < minLength || !name.startsWith(prefix) || !name.endsWith(suffix)) return false;
      let at = prefix.length;
      const end = name.length - suffix.length;
      for (const piece of middle) {
        const found = name.indexOf(piece, at);
        if (found === -1 || found + piece.length > end) return false;
        at = found + piece.length;
      }
      return true;
    };
  }
  return (name) => globMatch(p, name);
}

/** The whole of `name` against `pattern` (`*`, `?`, literals). */
export function globMatch(pattern: string, name: string): boolean {
  let pi = 0;
  let ni = 0;
  let starPi = -1; // position in pattern just after the last `*` seen
  let starNi = 0; // position in name where that `*` started matching
  while (ni < name.length) {
    const pc = pattern.charCodeAt(pi);
    if (pi < pattern.length && pc === 42 /* * */) {
      starPi = ++pi;
      starNi = ni;
    } else if (pi < pattern.length && (pc === 63 /* ? */ || pc === name.charCodeAt(ni))) {
      pi++;
      ni++;
    } else if (starPi !== -1) {
      // Let the last `*` swallow one more character and retry from there.
      pi = starPi;
      ni = ++starNi;
    } else {
      return false;
    }
  }
  while (pi < pattern.length && pattern.charCodeAt(pi) === 42) pi++;
  return pi === pattern.length;
}
