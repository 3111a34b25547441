/** What other areas (the MCP endpoint) use of user toolboxes. */
export { resolveUserToolbox, toolsOf, isDynamicId, type OfferedTool, type ResolvedUserToolbox, type ToolSource } from './resolve';
export type { ToolPolicy, ToolRef, Verdict } from './policy';
