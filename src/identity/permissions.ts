import type { components } from '../../generated/openapi';
import type { SystemRoleKey } from '../db/schema';
import { loadSpec } from '../spec';

export type Permission = components['schemas']['Permission'];

/** The permission catalog, in the spec's order. */
export const PERMISSIONS: readonly Permission[] = loadSpec().components.schemas.Permission.enum as Permission[];

const views = PERMISSIONS.filter((p) => p.endsWith(':view'));

export interface SystemRole {
  key: SystemRoleKey;
  name: string;
  description: string;
  seatClass: 'billable' | 'free_admin';
  permissions: readonly Permission[];
}

/**
 * The roles every organization has. They cannot be changed or deleted, and their
 * permissions are read from here, by `system_key`, never from the row: a permission a new
 * area adds to the catalog reaches every existing Owner, Admin and Auditor at once.
 */
export const SYSTEM_ROLES: readonly SystemRole[] = [
  {
    key: 'owner',
    name: 'Owner',
    description: 'Everything, including billing. An organization always keeps at least one active owner.',
    seatClass: 'billable',
    permissions: PERMISSIONS,
  },
  {
    key: 'admin',
    name: 'Admin',
    description: 'Everything except billing.',
    seatClass: 'billable',
    permissions: PERMISSIONS.filter((p) => p !== 'billing:manage'),
  },
  {
    key: 'member',
    name: 'Member',
    description: 'Uses connectors, connections, toolboxes and MCP servers; reads the organization.',
    seatClass: 'billable',
    permissions: [
      'organization:view',
      'member:view',
      'role:view',
      'team:view',
      'connector:view',
      'connection:view',
      'connection:use',
      'template:view',
      'toolbox:view',
      'mcp_server:view',
      'mcp_server:manage',
      'synthetic_tool:view',
      'synthetic_tool:execute',
      'restriction:view',
      'file:view',
      'file:manage',
    ],
  },
  {
    key: 'billing_admin',
    name: 'Billing admin',
    description: 'Manages the plan and payment details; takes no paid seat.',
    seatClass: 'free_admin',
    permissions: ['organization:view', 'billing:view', 'billing:manage', 'member:view'],
  },
  {
    key: 'auditor',
    name: 'Auditor',
    description: 'Reads everything, including the audit log, and changes nothing; takes no paid seat.',
    seatClass: 'free_admin',
    permissions: views.concat(['audit_log:view']),
  },
];

const SYSTEM_ROLE_PERMISSIONS = new Map<string, readonly Permission[]>(SYSTEM_ROLES.map((role) => [role.key, role.permissions]));

/** A role's permissions: a system role's from the catalog, a custom role's as stored. */
export function rolePermissions(role: { system_key: string | null; permissions: readonly string[] }): readonly string[] {
  return role.system_key === null ? role.permissions : (SYSTEM_ROLE_PERMISSIONS.get(role.system_key) ?? []);
}

/** The union of what a member's roles grant: custom roles' stored permissions and system roles' by key. */
export function heldPermissions(customPermissions: readonly string[], systemKeys: readonly string[]): Set<string> {
  const held = new Set(customPermissions);
  for (const key of systemKeys) for (const permission of SYSTEM_ROLE_PERMISSIONS.get(key) ?? []) held.add(permission);
  return held;
}
