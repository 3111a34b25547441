/**
 * Matches a request path to an operation in time proportional to the number of path
 * segments, not the number of operations: the spec's paths are compiled once into a segment
 * tree where literal segments win over `{param}` segments. (openapi-backend's own matcher
 * builds a RegExp per operation per request.)
 */
export interface RouteMatch<T> {
  /** The operation for the request's method, if the path has one. */
  route: T | undefined;
  /** The methods the path supports, upper-case, for 405 answers (shared: do not change it). */
  readonly allowed: readonly string[];
}

interface Node<T> {
  literal: Map<string, Node<T>>;
  param: Node<T> | undefined;
  methods: Map<string, T>;
  /** The methods of `methods` as a 405 lists them, kept current by `add`. */
  allowed: string[];
}

const newNode = <T>(): Node<T> => ({ literal: new Map(), param: undefined, methods: new Map(), allowed: [] });

export class PathRouter<T> {
  private readonly root: Node<T> = newNode();

  add(method: string, template: string, route: T): void {
    let node = this.root;
    for (const segment of split(template)) {
      if (segment.startsWith('{') && segment.endsWith('}')) {
        node.param ??= newNode();
        node = node.param;
      } else {
        let next = node.literal.get(segment);
        if (!next) node.literal.set(segment, (next = newNode()));
        node = next;
      }
    }
    node.methods.set(method.toUpperCase(), route);
    const allowed = [...node.methods.keys()];
    if (node.methods.has('GET') && !node.methods.has('HEAD')) allowed.push('HEAD');
    node.allowed = allowed.sort();
  }

  /** Null when no path matches at all. HEAD is answered wherever GET is (RFC 9110 §9.3.2). */
  match(method: string, path: string): RouteMatch<T> | null {
    const node = this.find(this.root, split(path), 0);
    if (!node) return null;
    const upper = method.toUpperCase();
    const route = node.methods.get(upper) ?? (upper === 'HEAD' ? node.methods.get('GET') : undefined);
    return { route, allowed: node.allowed };
  }

  private find(node: Node<T>, segments: string[], index: number): Node<T> | undefined {
    if (index === segments.length) return node.methods.size > 0 ? node : undefined;
    const segment = segments[index] as string;
    const literal = node.literal.get(segment);
    const viaLiteral = literal && this.find(literal, segments, index + 1);
    if (viaLiteral) return viaLiteral;
    return node.param && segment !== '' ? this.find(node.param, segments, index + 1) : undefined;
  }
}

function split(path: string): string[] {
  const trimmed = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
  return trimmed.split('/').slice(1);
}
