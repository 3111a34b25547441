export { Policy, type PolicyRestrictionInput, type PolicySubject, type ToolRef, type Verdict } from './evaluate';
export { loadPolicy, loadPolicyForMember, policySubjectOf } from './load';
