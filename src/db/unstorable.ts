/**
 * Whether a query failed on text PostgreSQL cannot hold: the NUL character (U+0000) in a text
 * value (SQLSTATE 22021, character_not_in_repertoire) or a \u0000 escape in JSON stored as
 * jsonb (22P05, untranslatable_character). Such text can only come from the request, so the
 * answer is the client's 400, not a 500; the write's transaction has rolled back.
 */
const UNSTORABLE_TEXT_STATES = new Set(['22021', '22P05']);

export function isUnstorableText(err: unknown): boolean {
  const code = err && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  return typeof code === 'string' && UNSTORABLE_TEXT_STATES.has(code);
}

/** The text with each NUL character replaced (U+FFFD), for what the server writes on its own from a client's input. */
export function storableText(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\uFFFD') : text;
}
