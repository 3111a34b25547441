/** What other parts of the app use of this area; nothing else of it is reached from outside. */
export { findRestriction, restrictionsNaming, type RestrictionRow } from './restrictions.repo';
