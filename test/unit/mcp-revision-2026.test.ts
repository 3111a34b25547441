// Which era a POST to /mcp/{mcpId} speaks, and the 2026-07-28 additions to results: the cases
// the integration tests (test/integration/mcp-endpoint-2026.test.ts) do not each send.
import { decodeHeaderValue, eraOf, modernResponse, withoutHeaderMirroring } from '../../src/mcp/endpoint/revision-2026';

const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
const request = (method: string, params: Record<string, unknown> = {}) => ({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: meta } });
const headers = (version: string | undefined, method?: string, name?: string) => ({ version, method, name });

describe('eraOf', () => {
  it('keeps the handshake era for handshake headers, and for no header without 2026 _meta', () => {
    expect(eraOf(headers('2025-06-18'), { jsonrpc: '2.0', id: 1, method: 'tools/list' }, 'req_1')).toEqual({ era: 'handshake', version: '2025-06-18' });
    const sameMeta = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2025-06-18' } } };
    expect(eraOf(headers('2025-06-18'), sameMeta, 'req_1')).toEqual({ era: 'handshake', version: '2025-06-18' });
    expect(eraOf(headers(undefined), { jsonrpc: '2.0', id: 1, method: 'ping' }, 'req_1')).toEqual({ era: 'handshake', version: '2025-03-26' });
    expect(eraOf(headers(undefined), [{ jsonrpc: '2.0', id: 1, method: 'ping' }], 'req_1')).toEqual({ era: 'handshake', version: '2025-03-26' });
  });

  it('serves 2026-07-28 requests whose headers mirror the body, and notifications without checks', () => {
    expect(eraOf(headers('2026-07-28', 'tools/list'), request('tools/list'), 'req_1')).toEqual({ era: 'modern' });
    expect(eraOf(headers('2026-07-28', 'tools/call', 'a__b'), request('tools/call', { name: 'a__b' }), 'req_1')).toEqual({ era: 'modern' });
    expect(eraOf(headers('2026-07-28'), { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } }, 'req_1')).toEqual({ era: 'modern' });
  });

  it('refuses with the codes the revision defines', () => {
    const code = (era: ReturnType<typeof eraOf>) => (era.era === 'refused' ? [era.status, era.body.error.code] : era.era);
    expect(
      code(
        eraOf(
          headers('2027-01-01', 'tools/list'),
          { ...request('tools/list'), params: { _meta: { ...meta, 'io.modelcontextprotocol/protocolVersion': '2027-01-01' } } },
          'r',
        ),
      ),
    ).toEqual([400, -32022]);
    expect(code(eraOf(headers('2027-01-01'), { jsonrpc: '2.0', id: 1, method: 'ping' }, 'r'))).toEqual([400, -32022]);
    expect(code(eraOf(headers(undefined, 'tools/list'), request('tools/list'), 'r'))).toEqual([400, -32020]);
    // A handshake header with _meta naming another revision: the header must match _meta.
    expect(code(eraOf(headers('2025-11-25', 'tools/list'), request('tools/list'), 'r'))).toEqual([400, -32020]);
    expect(code(eraOf(headers('2026-07-28', 'tools/list'), { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }, 'r'))).toEqual([400, -32602]);
    expect(code(eraOf(headers('2026-07-28', 'tools/list'), { jsonrpc: '2.0', id: 1, method: 'tools/list' }, 'r'))).toEqual([400, -32602]);
    expect(code(eraOf(headers('2026-07-28', 'tools/call', 'x__y'), request('tools/call', { name: 'a__b' }), 'r'))).toEqual([400, -32020]);
    expect(code(eraOf(headers('2026-07-28', 'tools/call'), request('tools/call', { name: 'a__b' }), 'r'))).toEqual([400, -32020]);
    expect(code(eraOf(headers('2026-07-28'), request('tools/list'), 'r'))).toEqual([400, -32020]);
  });

  it('answers an unsupported version with the request id and the supported versions', () => {
    const era = eraOf(
      headers('1999-01-01', 'server/discover'),
      { jsonrpc: '2.0', id: 'd', method: 'server/discover', params: { _meta: { ...meta, 'io.modelcontextprotocol/protocolVersion': '1999-01-01' } } },
      'req_9',
    );
    expect(era).toEqual({
      era: 'refused',
      status: 400,
      body: {
        jsonrpc: '2.0',
        id: 'd',
        error: {
          code: -32022,
          message: 'Unsupported protocol version',
          data: { supported: ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'], requested: '1999-01-01', request_id: 'req_9' },
        },
      },
    });
  });
});

describe('decodeHeaderValue', () => {
  it('decodes the Base64 sentinel and leaves other values alone', () => {
    expect(decodeHeaderValue(`=?base64?${Buffer.from('Hello, 世界').toString('base64')}?=`)).toBe('Hello, 世界');
    expect(decodeHeaderValue('crm__whoami')).toBe('crm__whoami');
    expect(decodeHeaderValue('=?BASE64?abc?=')).toBe('=?BASE64?abc?=');
  });
});

describe('modernResponse', () => {
  const info = { name: 'mcp-control-plane', title: 'S', version: '0.1.0' };
  it('adds resultType and serverInfo beside the upstream’s _meta, cache hints when asked, and leaves errors alone', () => {
    const out = modernResponse({ jsonrpc: '2.0', id: 1, result: { content: [], _meta: { 'com.example/trace': 'x' } } }, info);
    expect(out.result).toEqual({ content: [], resultType: 'complete', _meta: { 'com.example/trace': 'x', 'io.modelcontextprotocol/serverInfo': info } });
    expect(modernResponse({ jsonrpc: '2.0', id: 1, result: { tools: [] } }, info, { ttlMs: 5 }).result).toMatchObject({ ttlMs: 5, cacheScope: 'private' });
    const error = { jsonrpc: '2.0' as const, id: 1, error: { code: -32602, message: 'x' } };
    expect(modernResponse(error, info)).toBe(error);
  });
});

describe('withoutHeaderMirroring', () => {
  it('drops x-mcp-header wherever the input schema has it, and returns other tools as they are', () => {
    const tool = {
      name: 'a__b',
      inputSchema: {
        type: 'object',
        properties: { r: { type: 'string', 'x-mcp-header': 'R' }, n: { type: 'object', properties: { z: { type: 'integer', 'x-mcp-header': 'Z' } } } },
      },
    };
    expect(withoutHeaderMirroring(tool).inputSchema).toEqual({
      type: 'object',
      properties: { r: { type: 'string' }, n: { type: 'object', properties: { z: { type: 'integer' } } } },
    });
    const plain = { name: 'c__d', inputSchema: { type: 'object' } };
    expect(withoutHeaderMirroring(plain)).toBe(plain);
  });
});
