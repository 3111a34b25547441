import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';

/**
 * Where the service keeps bytes that do not belong in the database (organization logos now,
 * tool files later), addressed by key. One interface, so that a deployment can put them in
 * an object store without the areas noticing; the default is a folder under DATA_DIR.
 */
export interface Storage {
  /** Stores the bytes under the key, replacing what was there. */
  put(key: string, bytes: Buffer): Promise<void>;
  /** The bytes under the key, or null when there are none. */
  get(key: string): Promise<Buffer | null>;
  /** Removes the key; removing what is not there is not an error. */
  delete(key: string): Promise<void>;
}

/** Keys are paths of lowercase segments (`organization/org_…/logo/9f86…`): nothing that could leave the folder. */
const KEY = /^[A-Za-z0-9_-]+(?:\/[A-Za-z0-9_.-]+)*$/;

function checkKey(key: string): void {
  if (!KEY.test(key) || key.split('/').some((segment) => segment === '.' || segment === '..')) {
    throw new Error(`Storage key ${JSON.stringify(key)} is not a path of plain segments.`);
  }
}

/**
 * Storage on the local disk, in `root` (DATA_DIR/storage): folders 0700, files 0600, written
 * to a temporary name and renamed so that a reader never sees half a file.
 */
export class DiskStorage implements Storage {
  constructor(readonly root: string) {}

  private path(key: string): string {
    checkKey(key);
    const path = resolve(this.root, ...key.split('/'));
    if (!path.startsWith(resolve(this.root) + sep)) throw new Error(`Storage key ${key} leaves the storage folder.`);
    return path;
  }

  async put(key: string, bytes: Buffer): Promise<void> {
    const path = this.path(key);
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const temporary = `${path}.${createHash('sha256').update(`${process.pid}:${Date.now()}:${Math.random()}`).digest('hex').slice(0, 12)}.tmp`;
    await writeFile(temporary, bytes, { mode: 0o600 });
    await rename(temporary, path);
  }

  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.path(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.path(key), { force: true });
  }

  /** Whether the key holds bytes (for tests and checks). */
  async has(key: string): Promise<boolean> {
    try {
      return (await stat(this.path(key))).isFile();
    } catch {
      return false;
    }
  }
}

const byRoot = new Map<string, Storage>();

/** The deployment's storage: one per data folder, shared by every area of the process. */
export function storageOf(config: { dataDir: string }): Storage {
  const root = join(config.dataDir, 'storage');
  let storage = byRoot.get(root);
  if (!storage) {
    storage = new DiskStorage(root);
    byRoot.set(root, storage);
  }
  return storage;
}
