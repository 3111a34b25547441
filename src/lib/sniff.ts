/**
 * What a file's first bytes say it is, whatever it was declared as: the formats people
 * are asked for (documents, images, archives) and the ones that are dangerous when
 * mistaken for another (HTML, SVG, executables). Hand-written because `file-type` needs
 * Node 22; the signatures are those of each format's specification, as the WHATWG MIME
 * Sniffing standard lists them for the web ones.
 */

/** How many leading bytes `sniff` looks at. */
export const SNIFF_BYTES = 512;

/** A sniffed type, and the declared media types it is consistent with (a DOCX is a ZIP). */
export interface Sniffed {
  type: string;
  /** Media types and ranges (`application/vnd.openxmlformats-officedocument.*`) a file of this signature may truthfully be declared as. */
  compatible: readonly string[];
}

const startsWith = (bytes: Buffer, signature: readonly number[], offset = 0) =>
  bytes.length >= offset + signature.length && signature.every((b, i) => bytes[offset + i] === b);
const ascii = (bytes: Buffer, text: string, offset = 0) => startsWith(bytes, [...Buffer.from(text, 'latin1')], offset);

/** Containers that many formats are made of: a ZIP is also an Office document, an EPUB, a JAR. */
const ZIP_FAMILY = [
  'application/zip',
  'application/x-zip-compressed',
  'application/vnd.openxmlformats-officedocument.*',
  'application/vnd.oasis.opendocument.*',
  'application/epub+zip',
  'application/java-archive',
  'application/vnd.android.package-archive',
];

const BINARY: readonly { type: string; test: (b: Buffer) => boolean; compatible?: readonly string[] }[] = [
  { type: 'application/pdf', test: (b) => ascii(b, '%PDF-') },
  { type: 'image/png', test: (b) => startsWith(b, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]) },
  { type: 'image/jpeg', test: (b) => startsWith(b, [0xff, 0xd8, 0xff]), compatible: ['image/jpeg', 'image/jpg', 'image/pjpeg'] },
  { type: 'image/gif', test: (b) => ascii(b, 'GIF87a') || ascii(b, 'GIF89a') },
  { type: 'image/webp', test: (b) => ascii(b, 'RIFF') && ascii(b, 'WEBP', 8) },
  { type: 'image/bmp', test: (b) => ascii(b, 'BM') && b.length >= 14 && b.readUInt32LE(2) > 0 && b[6] === 0 && b[7] === 0 },
  { type: 'image/tiff', test: (b) => startsWith(b, [0x49, 0x49, 0x2a, 0x00]) || startsWith(b, [0x4d, 0x4d, 0x00, 0x2a]) },
  { type: 'image/x-icon', test: (b) => startsWith(b, [0x00, 0x00, 0x01, 0x00]), compatible: ['image/x-icon', 'image/vnd.microsoft.icon'] },
  { type: 'application/zip', test: (b) => startsWith(b, [0x50, 0x4b, 0x03, 0x04]) || startsWith(b, [0x50, 0x4b, 0x05, 0x06]), compatible: ZIP_FAMILY },
  { type: 'application/gzip', test: (b) => startsWith(b, [0x1f, 0x8b, 0x08]), compatible: ['application/gzip', 'application/x-gzip'] },
  { type: 'application/x-7z-compressed', test: (b) => startsWith(b, [0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c]) },
  { type: 'application/vnd.rar', test: (b) => ascii(b, 'Rar!\x1a\x07'), compatible: ['application/vnd.rar', 'application/x-rar-compressed'] },
  {
    type: 'application/x-ole-storage',
    // Compound File Binary: the legacy Office formats (.doc, .xls, .ppt) and .msi.
    test: (b) => startsWith(b, [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1]),
    compatible: [
      'application/msword',
      'application/vnd.ms-excel',
      'application/vnd.ms-powerpoint',
      'application/vnd.ms-outlook',
      'application/x-ole-storage',
      'application/x-msi',
    ],
  },
  {
    type: 'application/x-msdownload',
    test: (b) => ascii(b, 'MZ'),
    compatible: ['application/x-msdownload', 'application/vnd.microsoft.portable-executable', 'application/x-dosexec'],
  },
  {
    type: 'application/x-elf',
    test: (b) => startsWith(b, [0x7f, 0x45, 0x4c, 0x46]),
    compatible: ['application/x-elf', 'application/x-executable', 'application/x-sharedlib'],
  },
  { type: 'audio/mpeg', test: (b) => ascii(b, 'ID3'), compatible: ['audio/mpeg', 'audio/mp3'] },
  {
    type: 'video/mp4',
    test: (b) => ascii(b, 'ftyp', 4),
    compatible: ['video/mp4', 'video/quicktime', 'audio/mp4', 'video/3gpp', 'image/heic', 'image/heif', 'image/avif'],
  },
  { type: 'audio/wav', test: (b) => ascii(b, 'RIFF') && ascii(b, 'WAVE', 8), compatible: ['audio/wav', 'audio/x-wav', 'audio/wave'] },
];

/** The leading text, lowercased, after a BOM and whitespace: where HTML, SVG and XML announce themselves. */
function leadingText(bytes: Buffer): string {
  let text = bytes.toString('utf8');
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  return text.trimStart().toLowerCase();
}

/** The WHATWG sniffing standard's HTML openers, each followed by a space or `>`. */
const HTML_OPENERS = [
  '<!doctype html',
  '<html',
  '<head',
  '<script',
  '<iframe',
  '<h1',
  '<div',
  '<font',
  '<table',
  '<a',
  '<style',
  '<title',
  '<b',
  '<body',
  '<br',
  '<p',
  '<!--',
];

function markup(bytes: Buffer): Sniffed | null {
  const text = leadingText(bytes);
  for (const opener of HTML_OPENERS) {
    if (text.startsWith(opener)) {
      const next = text.charAt(opener.length);
      if (opener === '<!--' || next === ' ' || next === '>' || next === '\t' || next === '\n' || next === '\r' || next === '') {
        return { type: 'text/html', compatible: ['text/html', 'application/xhtml+xml'] };
      }
    }
  }
  if (text.startsWith('<svg') || (text.startsWith('<?xml') && text.includes('<svg'))) return { type: 'image/svg+xml', compatible: ['image/svg+xml'] };
  if (text.startsWith('<?xml')) return { type: 'application/xml', compatible: ['application/xml', 'text/xml', 'application/*+xml', 'application/vnd.*'] };
  return null;
}

/** What the bytes are, when their start says so; null when nothing recognisable (plain text, CSV, JSON, unknown binary). */
export function sniff(head: Buffer): Sniffed | null {
  for (const format of BINARY) if (format.test(head)) return { type: format.type, compatible: format.compatible ?? [format.type] };
  return markup(head);
}

/** Whether `type` (no parameters) falls in `range` (`image/png`, `image/*`, `application/vnd.openxmlformats-officedocument.*`). */
export function inRange(type: string, range: string): boolean {
  if (range === '*/*') return true;
  if (range.endsWith('*')) return type.startsWith(range.slice(0, -1));
  const plus = /^([^/]+)\/\*\+(.+)$/.exec(range);
  if (plus) return type.startsWith(`${plus[1]}/`) && type.endsWith(`+${plus[2]}`);
  return type === range;
}

/**
 * Types whose every file starts with a signature `sniff` knows: bytes declared as one of
 * these that carry no signature at all are not what they claim.
 */
const SIGNED = new Set(BINARY.flatMap((f) => f.compatible ?? [f.type]).filter((t) => !t.includes('*')));

/**
 * Whether bytes whose start is `head` may be a file of one of the accepted ranges (empty:
 * any). Refused: bytes recognisably of a type outside every accepted range (an HTML page
 * sent for `image/*`), and bytes with no known signature when every accepted range is a
 * type that always has one (a text file sent for `application/pdf`).
 */
export function fitsAccepted(head: Buffer, accepted: readonly string[]): { ok: true } | { ok: false; sniffed: string | null } {
  if (accepted.length === 0) return { ok: true };
  const found = sniff(head);
  if (found) {
    const ok = accepted.some((range) => found.compatible.some((c) => inRange(c, range) || inRange(range, c)));
    return ok ? { ok: true } : { ok: false, sniffed: found.type };
  }
  return accepted.every((range) => SIGNED.has(range)) ? { ok: false, sniffed: null } : { ok: true };
}
