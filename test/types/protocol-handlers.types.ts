// Checked by `make typecheck`, never run: the handler of a protocol operation (`x-protocol` in
// the spec) receives a ProtocolInput and may answer any status its spec declares, typed from
// generated/operations.ts; a REST operation's handler gets its input checked and answers successes only.
import type { AreaHandlers, OperationHandler, OperationInput, ProtocolInput, ProtocolResult } from '../../src/http/handler-types';
import type { RequestContext } from '../../src/http/context';

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const holds = <T extends true>(): T => true as T;

type InputOf<H> = H extends (input: infer I, ctx: RequestContext) => unknown ? I : never;
type ResultOf<H> = H extends (input: never, ctx: RequestContext) => Promise<infer R> ? R : never;

// The MCP endpoint (x-protocol: jsonrpc) and a SCIM operation get the problems too …
holds<Equal<InputOf<OperationHandler<'postMcpMessage', RequestContext>>, ProtocolInput<OperationInput<'postMcpMessage'>>>>();
holds<Equal<InputOf<OperationHandler<'getScimV2User', RequestContext>>, ProtocolInput<OperationInput<'getScimV2User'>>>>();
// … and may answer with an error status of their own protocol.
holds<Equal<ResultOf<OperationHandler<'getScimV2User', RequestContext>>, ProtocolResult<'getScimV2User'>>>();
// A REST operation keeps its validated input.
holds<Equal<InputOf<OperationHandler<'listTeams', RequestContext>>, OperationInput<'listTeams'>>>();

export const handlers: AreaHandlers<'MCP control plane', RequestContext> = {
  async deleteMcpSession(input) {
    // @ts-expect-error -- the input may be problems: it must be looked at before it is used
    void input.value.params.mcpId;
    if (!input.valid) return { status: 400, body: { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request' } } };
    void input.value.params.mcpId;
    return { status: 204 };
  },
};

export const rest: AreaHandlers<'Teams', RequestContext> = {
  // @ts-expect-error -- a REST operation answers its errors by throwing, never as a result
  async getTeam() {
    return { status: 404, body: { code: 'not_found' } };
  },
};
