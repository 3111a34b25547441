/** Jest through @swc/jest; types are checked separately by `make typecheck`. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.(ts|js|mjs)$': ['@swc/jest', { jsc: { target: 'es2022', parser: { syntax: 'typescript' } }, module: { type: 'commonjs' } }] },
  transformIgnorePatterns: ['/node_modules/(?!(oidc-provider|openid-client|oauth4webapi|jose|koa|@koa|otplib|@otplib|@scure|@noble)/)'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  maxWorkers: 2,
  testTimeout: 30000,
};
