import type { components } from '../../../generated/openapi';

type Schemas = components['schemas'];
export type SyntheticTool = Schemas['SyntheticTool'];
export type SyntheticToolCreate = Schemas['SyntheticToolCreate'];
export type SyntheticToolUpdate = Schemas['SyntheticToolUpdate'];
export type SyntheticToolStep = Schemas['SyntheticToolStep'];
export type SyntheticToolStepInput = Schemas['SyntheticToolStepInput'];
export type SyntheticToolExecution = Schemas['SyntheticToolExecution'];
export type SyntheticToolExecuteRequest = Schemas['SyntheticToolExecuteRequest'];
export type SyntheticToolStepRun = Schemas['SyntheticToolStepRun'];
export type Binding = Schemas['UserToolboxBinding'];
