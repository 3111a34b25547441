import YAML from 'yaml';
import type { Handlers } from '../../http/api';
import { loadSpec, type OpenApiDocument } from '../../spec';
import { apiReferencePage, DOCS_CONTENT_SECURITY_POLICY } from './docs';

interface Served {
  json: OpenApiDocument;
  yaml: string;
}

const served = new Map<string, Served>();

/** The document as this deployment serves it: its own base URL as the server. Built once per base URL. */
function documentFor(baseUrl: string): Served {
  let doc = served.get(baseUrl);
  if (!doc) {
    const json = { ...loadSpec(), servers: [{ url: baseUrl, description: 'This deployment.' }] };
    doc = { json, yaml: YAML.stringify(json, { lineWidth: 0 }) };
    served.set(baseUrl, doc);
  }
  return doc;
}

export const schemaHandlers = {
  async getOpenApiJson(_input, ctx) {
    return { status: 200, body: documentFor(ctx.deps.config.baseUrl).json as any };
  },
  async getSchemaOpenApiJson(_input, ctx) {
    return { status: 200, body: documentFor(ctx.deps.config.baseUrl).json as any };
  },
  async getOpenApiYaml(_input, ctx) {
    return { status: 200, body: documentFor(ctx.deps.config.baseUrl).yaml, contentType: 'application/yaml; charset=utf-8' };
  },
  async getSchemaOpenApiYml(_input, ctx) {
    return { status: 200, body: documentFor(ctx.deps.config.baseUrl).yaml, contentType: 'application/yaml; charset=utf-8' };
  },
  async getApiReference() {
    return {
      status: 200,
      body: apiReferencePage(),
      contentType: 'text/html; charset=utf-8',
      headers: { 'Content-Security-Policy': DOCS_CONTENT_SECURITY_POLICY },
    };
  },
} satisfies Partial<Handlers>;
