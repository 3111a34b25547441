import { ConfigError, loadConfig } from '../../src/config';
import { fitsAccepted, inRange, sniff } from '../../src/lib/sniff';

/** STORAGE_BACKEND, S3_… and FILE_…: where tool files live and how large they may be, checked at start. */
describe('file storage settings', () => {
  const load = (env: Record<string, string>) => loadConfig({ NODE_ENV: 'test', ENCRYPTION_KEY: 'a'.repeat(64), ...env }).files;

  it('keeps files on the disk, 25 MiB at most, by default', () => {
    expect(load({})).toEqual({
      maxFileBytes: 26_214_400,
      storage: { backend: 'disk' },
      sweepIntervalMs: 60_000,
      reservationTtlSeconds: 86_400,
      orphanGraceSeconds: 21_600,
    });
  });

  it('reads an S3-compatible bucket: path style when an endpoint is named, credentials in pairs, a prefix of plain segments', () => {
    expect(
      load({
        STORAGE_BACKEND: 's3',
        S3_BUCKET: 'tool-files',
        S3_ENDPOINT: 'https://minio.internal:9000/',
        S3_ACCESS_KEY_ID: 'AKIA',
        S3_SECRET_ACCESS_KEY: 'secret',
        S3_PREFIX: '/prod/eu/',
      }).storage,
    ).toEqual({
      backend: 's3',
      bucket: 'tool-files',
      endpoint: 'https://minio.internal:9000',
      region: 'us-east-1',
      credentials: { accessKeyId: 'AKIA', secretAccessKey: 'secret' },
      forcePathStyle: true,
      prefix: 'prod/eu',
    });
    expect(load({ STORAGE_BACKEND: 's3', S3_BUCKET: 'b', S3_REGION: 'eu-west-1' }).storage).toMatchObject({
      endpoint: null,
      credentials: null,
      forcePathStyle: false,
      region: 'eu-west-1',
    });
  });

  it('refuses an S3 backend without a bucket, half a credential pair, a bad endpoint or prefix, and an unknown backend', () => {
    for (const env of <Record<string, string>[]>[
      { STORAGE_BACKEND: 's3' },
      { STORAGE_BACKEND: 's3', S3_BUCKET: 'b', S3_ACCESS_KEY_ID: 'only-the-id' },
      { STORAGE_BACKEND: 's3', S3_BUCKET: 'b', S3_ENDPOINT: 'minio:9000' },
      { STORAGE_BACKEND: 's3', S3_BUCKET: 'b', S3_ENDPOINT: 'ftp://minio' },
      { STORAGE_BACKEND: 's3', S3_BUCKET: 'b', S3_PREFIX: 'a/../b' },
      { STORAGE_BACKEND: 'gcs' },
      { FILE_MAX_BYTES: '0' },
    ]) {
      expect(() => load(env)).toThrow(ConfigError);
    }
  });
});

/** What the first bytes say a file is, and whether that fits an upload request's accepted types. */
describe('sniffing', () => {
  const bytes = (text: string) => Buffer.from(text, 'latin1');

  it('recognises documents, images, archives, executables and markup by their signatures', () => {
    const cases: [Buffer, string | null][] = [
      [bytes('%PDF-1.7\n%âãÏÓ'), 'application/pdf'],
      [Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0]), 'image/png'],
      [Buffer.from([0xff, 0xd8, 0xff, 0xe0]), 'image/jpeg'],
      [bytes('GIF89a\x01\x00'), 'image/gif'],
      [bytes('RIFF\x10\x00\x00\x00WEBPVP8 '), 'image/webp'],
      [bytes('PK\x03\x04\x14\x00'), 'application/zip'],
      [bytes('MZ\x90\x00'), 'application/x-msdownload'],
      [bytes('\x7fELF\x02'), 'application/x-elf'],
      [Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes('  <!DOCTYPE html><title>x</title>')]), 'text/html'],
      [bytes('<script>alert(1)</script>'), 'text/html'],
      [bytes('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>'), 'image/svg+xml'],
      [bytes('id,title\n1,Flaky login\n'), null],
      [bytes('{"a":1}'), null],
      [bytes('<abbr>not html by the standard</abbr>'), null],
    ];
    for (const [head, type] of cases)
      expect([head.toString('latin1').slice(0, 12), sniff(head)?.type ?? null]).toEqual([head.toString('latin1').slice(0, 12), type]);
  });

  it('matches media ranges', () => {
    expect(inRange('image/png', 'image/*')).toBe(true);
    expect(inRange('image/png', 'image/jpeg')).toBe(false);
    expect(inRange('application/vnd.openxmlformats-officedocument.wordprocessingml.document', 'application/vnd.openxmlformats-officedocument.*')).toBe(true);
    expect(inRange('image/svg+xml', 'image/*+xml')).toBe(true);
  });

  it('refuses bytes of another type than accepted, and signature-less bytes where every accepted type has one', () => {
    const pdf = bytes('%PDF-1.4 ...');
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    const csv = bytes('a,b\n1,2\n');
    expect(fitsAccepted(pdf, [])).toEqual({ ok: true });
    expect(fitsAccepted(pdf, ['application/pdf'])).toEqual({ ok: true });
    expect(fitsAccepted(png, ['application/pdf'])).toEqual({ ok: false, sniffed: 'image/png' });
    expect(fitsAccepted(csv, ['application/pdf', 'image/png'])).toEqual({ ok: false, sniffed: null });
    expect(fitsAccepted(csv, ['application/pdf', 'text/csv'])).toEqual({ ok: true });
    expect(fitsAccepted(bytes('<html><body>'), ['image/*'])).toEqual({ ok: false, sniffed: 'text/html' });
    // A DOCX is a ZIP: declared as one, it fits.
    expect(fitsAccepted(bytes('PK\x03\x04'), ['application/vnd.openxmlformats-officedocument.wordprocessingml.document'])).toEqual({ ok: true });
    expect(fitsAccepted(bytes('MZ\x90\x00'), ['application/zip'])).toEqual({ ok: false, sniffed: 'application/x-msdownload' });
  });
});
