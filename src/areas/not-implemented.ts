import type { OperationId } from '../../generated/operations';

/**
 * Operations of the contract whose area is not built yet. Each answers 501 `not_implemented`
 * (an Error object) to any caller, so the gap is visible; `npm run coverage` counts them per
 * tag. Building an operation means deleting its line here and adding its handler.
 */
export const NOT_IMPLEMENTED = [
  // Restrictions
  'listRestrictions',
  'createRestriction',
  'getRestriction',
  'deleteRestriction',
  'updateRestriction',
  // Access requests
  'listAccessRequests',
  'createAccessRequest',
  'getAccessRequest',
  'resolveAccessRequest',
  'withdrawAccessRequest',
  // Files
  'listFiles',
  'uploadFile',
  'createUploadRequest',
  'getUploadRequest',
  'reserveUploadRequestFile',
  'putUploadRequestFile',
  'deleteUploadRequestFile',
  'confirmUploadRequest',
  'getFile',
  'deleteFile',
  'listFileShares',
  'shareFile',
  'revokeFileShare',
  'downloadFile',
  // Notification destinations: the outbox worker that makes deliveries is not built yet
  'listNotificationDeliveries',
] as const satisfies readonly OperationId[];
