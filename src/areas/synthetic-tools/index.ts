/** What other areas use of synthetic tools (toolboxes, user toolboxes, the MCP endpoint). */
export { stepToolsOf, connectorSlugsOf, toSyntheticTool } from './synthetic-tools.service';
export { runSyntheticTool, recordSyntheticRun, refusalOutcome, type RunOptions, type RunTrace } from './synthetic-tools.run';
export type { SyntheticToolRow } from './synthetic-tools.repo';
export { findSyntheticTool } from './synthetic-tools.repo';
export type { SyntheticToolStep, SyntheticToolExecution } from './synthetic-tools.types';
