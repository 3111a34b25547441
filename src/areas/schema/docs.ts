import { readFileSync } from 'node:fs';
import type { RequestHandler } from 'express';
import { Representation, sendRepresentation } from '../../http/representation';

// Relative URLs, so the page also works behind a proxy that mounts the API under a prefix.
const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>MCP control plane API reference</title>
<style>body { margin: 0; }</style>
</head>
<body>
<div id="redoc"></div>
<script src="docs/assets/redoc.standalone.js"></script>
<script src="docs/assets/init.js"></script>
</body>
</html>
`;

const INIT = `Redoc.init('openapi.json', { expandResponses: '200,201', jsonSampleExpandLevel: 3, hideHostname: false }, document.getElementById('redoc'));\n`;

/**
 * Redoc draws with inline styles and runs its search index in a blob: worker; everything
 * else must come from this deployment. Other answers carry a policy under which nothing loads
 * (RESPONSE_SECURITY_HEADERS).
 */
export const DOCS_CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self' blob:",
  "worker-src 'self' blob:",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'self'",
  "frame-ancestors 'self'",
].join('; ');

export function apiReferencePage(): string {
  return PAGE;
}

/**
 * The page's two scripts, read once (Redoc's is a megabyte: sent compressed, and 304 to a
 * browser that holds it); any other /docs/assets/ path falls through to the API's 404.
 */
export function docsAssets(): RequestHandler {
  const script = 'text/javascript; charset=utf-8';
  const assets = new Map<string, Representation>([
    ['/docs/assets/redoc.standalone.js', new Representation(readFileSync(require.resolve('redoc/bundles/redoc.standalone.js')), script)],
    ['/docs/assets/init.js', new Representation(Buffer.from(INIT), script)],
  ]);
  return (req, res, next) => {
    const asset = req.method === 'GET' || req.method === 'HEAD' ? assets.get(req.path) : undefined;
    if (!asset) return next();
    sendRepresentation(req, res, asset, { 'Cache-Control': 'public, max-age=3600' }).catch(next);
  };
}
