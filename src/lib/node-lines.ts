/**
 * The Node.js release lines this server is built and tested for (.ci/run runs the suite on 20
 * and a representative part on 22 and 24: `make test-node-lines`). Another line may start and
 * then fail somewhere no test looked, so start-up refuses it with a clear message instead.
 */
export const SUPPORTED_NODE_LINES: readonly number[] = [20, 22, 24];

/** Why this Node.js cannot run the server, or null when it can. */
export function unsupportedNode(version: string = process.versions.node): string | null {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (!SUPPORTED_NODE_LINES.includes(major)) {
    return `Node.js ${version} is not a supported line; run it on Node.js ${SUPPORTED_NODE_LINES.join(', ')} (24 is the active LTS).`;
  }
  // The ESM-only libraries (openid-client) are loaded through require(), which needs 20.19 or 22.12.
  if (major === 20 && minor < 19) return `Node.js ${version} is too old on its line; use 20.19 or later (or Node.js 22 or 24).`;
  if (major === 22 && minor < 12) return `Node.js ${version} is too old on its line; use 22.12 or later (or Node.js 24).`;
  return null;
}
