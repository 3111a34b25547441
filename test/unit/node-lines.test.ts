import { SUPPORTED_NODE_LINES, unsupportedNode } from '../../src/lib/node-lines';

describe('the Node.js lines the server starts on', () => {
  it('takes the tested lines, and this process runs on one of them', () => {
    expect(SUPPORTED_NODE_LINES).toEqual([20, 22, 24]);
    expect(unsupportedNode()).toBeNull();
    for (const version of ['20.19.0', '20.20.2', '22.12.0', '22.23.3', '24.0.0', '24.21.0']) expect(unsupportedNode(version)).toBeNull();
  });

  it('refuses other lines, and releases of a line too old for what it loads, with what to run instead', () => {
    expect(unsupportedNode('18.20.4')).toMatch(/not a supported line; run it on Node\.js 20, 22, 24/);
    expect(unsupportedNode('21.7.3')).toMatch(/not a supported line/);
    expect(unsupportedNode('23.11.0')).toMatch(/not a supported line/);
    expect(unsupportedNode('25.1.0')).toMatch(/not a supported line/);
    expect(unsupportedNode('20.18.1')).toMatch(/use 20\.19 or later/);
    expect(unsupportedNode('22.11.0')).toMatch(/use 22\.12 or later/);
  });
});
