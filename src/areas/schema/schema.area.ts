import YAML from 'yaml';
import { defineArea } from '../../http/area';
import { Representation } from '../../http/representation';
import { loadSpec } from '../../spec';
import { apiReferencePage, DOCS_CONTENT_SECURITY_POLICY } from './docs';
import { DOCUMENT_SECURITY_HEADERS } from '../../http/security-headers';

interface Served {
  json: Representation;
  yaml: Representation;
}

const served = new Map<string, Served>();

/** The document as this deployment serves it: its own base URL as the server. Built once per base URL. */
function documentFor(baseUrl: string): Served {
  let doc = served.get(baseUrl);
  if (!doc) {
    const spec = loadSpec();
    // The deployment's own reference is the one link that surely exists.
    const info = { ...spec.info, contact: { ...(spec.info.contact as object), url: `${baseUrl}/docs` } };
    const json = { ...spec, info, servers: [{ url: baseUrl, description: 'This deployment.' }] };
    // Written for YAML 1.1 readers too (PyYAML, SnakeYAML-based generators): strings that look
    // like dates, numbers, booleans or null there are quoted, and read the same in YAML 1.2.
    const yaml = YAML.stringify(json, { lineWidth: 0, version: '1.1' });
    // Serialized once: the JSON document is a megabyte (11–23 ms to stringify on every request).
    doc = {
      json: new Representation(Buffer.from(JSON.stringify(json)), 'application/json; charset=utf-8'),
      yaml: new Representation(Buffer.from(yaml), 'application/yaml; charset=utf-8'),
    };
    served.set(baseUrl, doc);
  }
  return doc;
}

export default defineArea({
  tag: 'Schema',
  handlers: {
    async getOpenApiJson(_input, ctx) {
      return { status: 200, representation: documentFor(ctx.deps.config.baseUrl).json };
    },
    async getSchemaOpenApiJson(_input, ctx) {
      return { status: 200, representation: documentFor(ctx.deps.config.baseUrl).json };
    },
    async getOpenApiYaml(_input, ctx) {
      return { status: 200, representation: documentFor(ctx.deps.config.baseUrl).yaml };
    },
    async getSchemaOpenApiYml(_input, ctx) {
      return { status: 200, representation: documentFor(ctx.deps.config.baseUrl).yaml };
    },
    async getApiReference() {
      return {
        status: 200,
        body: apiReferencePage(),
        contentType: 'text/html; charset=utf-8',
        headers: { ...DOCUMENT_SECURITY_HEADERS, 'Content-Security-Policy': DOCS_CONTENT_SECURITY_POLICY },
      };
    },
  },
});
