import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { PathRouter } from '../../src/http/router';
import { loadSpec, type OpenApiDocument } from '../../src/spec';

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];

interface OperationRef {
  pointer: string;
  operation: Record<string, any>;
  /** The path is marked `x-cors`: the server answers its OPTIONS preflights itself. */
  cors: boolean;
}

const escape = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

function stripMappings(node: unknown): void {
  if (Array.isArray(node)) return node.forEach(stripMappings);
  if (!node || typeof node !== 'object') return;
  const record = node as Record<string, any>;
  if (record.discriminator) delete record.discriminator.mapping;
  Object.values(record).forEach(stripMappings);
}

/**
 * Checks a response against the document: the status must be one the operation declares,
 * the body must match the schema of its content type, and every response carries
 * X-Request-Id. Requests that match no operation must answer with the Error object.
 */
export class SpecChecker {
  private readonly ajv: Ajv2020;
  private readonly routes = new PathRouter<OperationRef>();
  private readonly validators = new Map<string, ValidateFunction>();

  constructor(private readonly doc: OpenApiDocument = loadSpec()) {
    const copy = structuredClone(doc) as Record<string, any>;
    stripMappings(copy);
    this.ajv = new Ajv2020({ strict: false, allErrors: true, discriminator: true, validateFormats: true });
    addFormats(this.ajv);
    this.ajv.addSchema(copy, 'spec');
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of METHODS) {
        if (item[method])
          this.routes.add(method, path, { pointer: `/paths/${escape(path)}/${method}`, operation: item[method], cors: item['x-cors'] === true });
      }
    }
  }

  private resolve(node: Record<string, any>, pointer: string): { node: Record<string, any>; pointer: string } {
    let current = node;
    let at = pointer;
    while (typeof current.$ref === 'string') {
      const ref = current.$ref as string;
      at = ref.slice(1);
      current = at
        .split('/')
        .slice(1)
        .reduce((n: any, key) => n[key.replace(/~1/g, '/').replace(/~0/g, '~')], this.doc);
    }
    return { node: current, pointer: at };
  }

  private validator(pointer: string): ValidateFunction {
    let fn = this.validators.get(pointer);
    if (!fn) {
      fn = this.ajv.compile({ $ref: `spec#${pointer}` });
      this.validators.set(pointer, fn);
    }
    return fn;
  }

  /**
   * `pending`: operations the app lists as not built. Their 501 `not_implemented` is the
   * contract's documented answer for a gap, so it is accepted for them and no other.
   */
  check(method: string, rawPath: string, status: number, headers: Headers, body: unknown, pending: ReadonlySet<string> = new Set()): string[] {
    const problems: string[] = [];
    const path = rawPath.split('?')[0] ?? rawPath;
    if (!headers.get('x-request-id')) problems.push('no X-Request-Id header');
    const match = this.routes.match(method, path);
    const contentType = (headers.get('content-type') ?? '').split(';')[0]?.trim() ?? '';
    const siblings = match && !match.route && method === 'options' ? match.allowed.flatMap((m) => this.routes.match(m.toLowerCase(), path)?.route ?? []) : [];
    if (siblings.some((s) => s.cors)) return this.checkPreflight(path, status, headers, body, siblings, pending);
    if (!match?.route) {
      // No operation: 404 or 405, or the rate limit (429) that every request is under; on a
      // path whose operations need a credential, 401 to a caller who sent none.
      const allowed = match ? [401, 405, 429] : [404, 429];
      if (!allowed.includes(status)) problems.push(`${method} ${path} matches no operation but answered ${status}`);
      this.checkSchema('/components/schemas/Error', body, problems, 'error body');
      return problems;
    }
    const { operation, pointer } = match.route;
    if (status === 501 && pending.has(operation.operationId)) {
      this.checkSchema('/components/schemas/Error', body, problems, `${operation.operationId} 501`);
      if ((body as { code?: string } | undefined)?.code !== 'not_implemented')
        problems.push(`${operation.operationId} answered 501 without the code not_implemented`);
      return problems;
    }
    const declared = operation.responses?.[String(status)];
    if (!declared) {
      problems.push(
        `${operation.operationId} answered ${status}, which the spec does not declare (declared: ${Object.keys(operation.responses ?? {}).join(', ')})`,
      );
      return problems;
    }
    const response = this.resolve(declared, `${pointer}/responses/${status}`);
    const content = response.node.content as Record<string, any> | undefined;
    if (!content) {
      if (body !== undefined && body !== '' && body !== null) problems.push(`${operation.operationId} ${status} declares no body but sent one`);
      return problems;
    }
    // An exact media type first, then a range (`*/*` for a file's bytes, whatever their type).
    const media = content[contentType]
      ? contentType
      : Object.keys(content).find((m) => contentType !== '' && (m === '*/*' || (m.endsWith('/*') && contentType.startsWith(m.slice(0, -1)))));
    if (!media) {
      problems.push(`${operation.operationId} ${status} answered ${contentType || 'no content type'}; the spec declares ${Object.keys(content).join(', ')}`);
      return problems;
    }
    const schemaPointer = `${response.pointer}/content/${escape(media)}/schema`;
    this.checkSchema(schemaPointer, body, problems, `${operation.operationId} ${status}`);
    for (const [name, header] of Object.entries<Record<string, any>>(response.node.headers ?? {})) {
      const resolved = this.resolve(header, '');
      if (resolved.node.required && !headers.get(name)) problems.push(`${operation.operationId} ${status} lacks the required header ${name}`);
    }
    return problems;
  }

  /**
   * An OPTIONS of an `x-cors` path, which the spec describes through that extension (see its
   * info section): 204 with the preflight headers and no body, or a refusal that one of the
   * path's operations declares (the MCP endpoint's 403 for a foreign Origin).
   */
  private checkPreflight(path: string, status: number, headers: Headers, body: unknown, siblings: OperationRef[], pending: ReadonlySet<string>): string[] {
    if (status === 204) {
      const problems: string[] = [];
      for (const name of ['access-control-allow-origin', 'access-control-allow-methods', 'access-control-allow-headers', 'access-control-max-age']) {
        if (!headers.get(name)) problems.push(`OPTIONS ${path} answered 204 without ${name}`);
      }
      if (body !== undefined && body !== '') problems.push(`OPTIONS ${path} answered 204 with a body`);
      return problems;
    }
    const declaring = siblings.find((s) => s.operation.responses?.[String(status)]);
    if (!declaring) return [`OPTIONS ${path} answered ${status}, which no operation of the path declares`];
    const method = declaring.pointer.split('/').pop() as string;
    return this.check(method, path, status, headers, body, pending);
  }

  private checkSchema(pointer: string, body: unknown, problems: string[], what: string): void {
    const validate = this.validator(pointer);
    if (!validate(body)) {
      problems.push(
        `${what} does not match the spec: ${this.ajv.errorsText(validate.errors, { separator: '; ' })}\nbody: ${JSON.stringify(body).slice(0, 2000)}`,
      );
    }
  }
}
