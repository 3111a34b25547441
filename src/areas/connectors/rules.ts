import { ApiError, validationError, type ValidationProblem } from '../../http/errors';
import { refuseUrl, type OutboundPolicy } from '../../outbound/client';
import type { ConnectorContent } from './content';

/**
 * The rules a connector's content follows beyond its JSON Schema, in one place for custom
 * connectors (create, update, pull) and the built-in catalog files. Pointers are those of
 * the content's members (`/auth/token_url`); `base` prefixes them.
 */
export interface ContentProblems {
  /** 400 `validation_failed`. */
  invalid: ValidationProblem[];
  /** 400 `outbound_url_not_allowed`: URLs the server would call (or send a browser to) that it refuses. */
  refused: ValidationProblem[];
}

const isHttps = (url: string): boolean => {
  try {
    return new URL(url).protocol === 'https:';
  } catch {
    return false;
  }
};

export function contentProblems(
  content: Partial<ConnectorContent>,
  policy: OutboundPolicy,
  options: { clientSecret?: boolean; base?: string } = {},
): ContentProblems {
  const base = options.base ?? '';
  const invalid: ValidationProblem[] = [];
  const refused: ValidationProblem[] = [];
  const bad = (pointer: string, message: string) => invalid.push({ in: 'body', pointer: `${base}${pointer}`, message });
  const refuse = (pointer: string, url: string) => {
    const reason = refuseUrl(url, policy);
    if (reason) refused.push({ in: 'body', pointer: `${base}${pointer}`, message: reason });
  };

  if (content.icon_url != null && !isHttps(content.icon_url)) bad('/icon_url', 'must be an https URL');
  if (content.mcp_url !== undefined) {
    let userinfo = false;
    try {
      const url = new URL(content.mcp_url);
      userinfo = url.username !== '' || url.password !== '';
    } catch {
      // refuseUrl says it is not a URL.
    }
    if (userinfo) bad('/mcp_url', 'must not carry a user name or password; per-member keys belong in connections');
    else refuse('/mcp_url', content.mcp_url);
  }
  const auth = content.auth;
  if (auth?.type === 'api_key' && auth.placement === 'query' && auth.value_prefix !== null) {
    bad('/auth/value_prefix', 'must be null with placement query');
  }
  if (auth?.type === 'oauth2') {
    if (auth.authorize_url !== null && !isHttps(auth.authorize_url)) {
      refused.push({ in: 'body', pointer: `${base}/auth/authorize_url`, message: 'must use https' });
    }
    if (auth.token_url !== null) refuse('/auth/token_url', auth.token_url);
    if (auth.revocation_url !== null) refuse('/auth/revocation_url', auth.revocation_url);
    if (options.clientSecret && auth.client_id === null) bad('/auth/client_secret', 'needs a client_id');
  }
  const firstIndex = new Map<string, number>();
  content.tools?.forEach((tool, i) => {
    if (firstIndex.has(`t:${tool.name}`)) bad(`/tools/${i}/name`, `repeats the tool name ${tool.name}`);
    else firstIndex.set(`t:${tool.name}`, i);
  });
  content.documentation?.forEach((entry, i) => {
    if (firstIndex.has(`d:${entry.key}`)) bad(`/documentation/${i}/key`, `repeats the key ${entry.key}`);
    else firstIndex.set(`d:${entry.key}`, i);
  });
  return { invalid, refused };
}

/** Throws the first class of problems found: validation, then refused URLs. */
export function assertContent(content: Partial<ConnectorContent>, policy: OutboundPolicy, options: { clientSecret?: boolean; base?: string } = {}): void {
  const { invalid, refused } = contentProblems(content, policy, options);
  if (invalid.length > 0) throw validationError(invalid);
  if (refused.length > 0) {
    throw new ApiError('outbound_url_not_allowed', `${refused.map((p) => `${p.pointer.slice(1).replace(/\//g, '.')} ${p.message}`).join('; ')}.`, {
      errors: refused,
    });
  }
}
