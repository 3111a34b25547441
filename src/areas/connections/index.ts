/** What other parts of the app (the MCP runtime, synthetic tools) use of connections. */
export {
  findConnection,
  findConnections,
  recordError,
  findRefreshing,
  recordUse,
  releaseRefreshLease,
  storeRefreshedCredentials,
  takeRefreshLease,
  updateConnection,
  type ConnectionRow,
} from './connections.repo';
